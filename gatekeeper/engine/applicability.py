"""What the run's metadata decides before any point is looked at: which policies apply
(`match`), whether their variants can be picked (`requires_config`), which rules apply
(`when`, overrides), metrics the source could not read whole, and the periods of
`steps: {every: config.k}`.

All of it is a function of the run's metadata, so it is worked out once per change of
the metadata, not for every rule on every poll.
"""

from __future__ import annotations

import fnmatch

from gatekeeper.checks import Outcome
from gatekeeper.engine import wording
from gatekeeper.engine.tracker import RuleTracker
from gatekeeper.model import Run
from gatekeeper.policy.binding import metric_error, missing_config
from gatekeeper.policy.conditions import first_failing, parse_conditions
from gatekeeper.policy.patterns import config_key
from gatekeeper.policy.schema import period_expr
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.verdict import Mode, Status


class Applicability:
    """Per rule, the outcome the metadata decides (None: judge its points); per run state
    a policy relaxes, the reason."""

    def __init__(self, policies: list[PolicySpec], trackers: list[RuleTracker]):
        self.policies, self.trackers = policies, trackers
        self.before: list[Outcome | None] = []
        self.allowed: dict[str, str] = {}
        self._keys = _keys_read(policies)
        self._seen: str | None = None

    def refresh(self) -> None:
        """The trackers changed (a template rule was made concrete): work it out again."""
        self._seen = None

    def update(self, run: Run) -> None:
        """Work it out again when what it reads of the metadata differs from the last
        run's. As text: repr keeps 1, 1.0 and True apart (`eq` and a period tell them
        apart; == does not), and reads only the config keys the policies name, not a
        whole config of hundreds of keys on every poll."""
        found = [run.lookup(key) for key in self._keys]
        seen = repr((run.name, run.tags, run.state, run.run_id, run.metric_errors, found))
        if seen == self._seen:
            return
        mismatch = {p.name: policy_mismatch(p, run) for p in self.policies}
        unset = {p.name: missing_config(p, run) for p in self.policies}
        before: list[Outcome | None] = []
        for tracker in self.trackers:
            rule = tracker.rule
            outcome = _applicability(rule, run, mismatch[rule.policy], unset[rule.policy])
            if outcome is None and rule.template:  # stands for metrics: nothing to bind
                outcome = unnamed_metric(rule, run)
                before.append(outcome)
                continue
            if outcome is None:
                outcome = metric_error(rule, run)
            if outcome is None and rule.check_from is not None:
                outcome = tracker.bind_bound(run)
            if outcome is None:
                tracker.bind(run)
            before.append(outcome)
        self.before = before
        self.allowed = {  # states relaxed by the enforce-mode policies that apply to this run
            state: wording.allowed_state(p.name, reason)
            for p in self.policies
            if p.mode is Mode.ENFORCE and mismatch[p.name] is None
            for state, reason in p.allow_states.items()
        }
        self._seen = seen


def _keys_read(policies: list[PolicySpec]) -> tuple[str, ...]:
    """The metadata keys (`config.a.b`, `name`, ...) that matching, variants, `when` and
    `every: config.k` look up, each once."""
    keys: list[str] = []
    for policy in policies:
        if policy.match is not None:
            keys += [f"config.{k}" for k in policy.match.config]
        keys += [f"config.{k}" for k in policy.requires_config]
        for rule in policy.rules:
            keys += [c.key for c in rule.conditions]
            keys += [rule.check_from] if rule.check_from else []
            keys += [rule.metric] if config_key(rule.metric) else []
            for text in rule.steps.period_from if rule.steps.kind == "every" else ():
                keys += period_expr(text).metrics
    return tuple(dict.fromkeys(keys))


def unnamed_metric(rule: RuleSpec, run: Run) -> Outcome | None:
    """A `metric: config.KEY` rule whose run config names no metric: ERROR saying which
    flag to give (a pattern rule is judged on what it matches: None)."""
    if config_key(rule.metric) is None:
        return None
    from gatekeeper.engine.expansion import config_metric

    try:
        config_metric(rule, run)
    except ValueError as exc:
        return Outcome(Status.ERROR, str(exc))
    return None


def policy_mismatch(policy: PolicySpec, run: Run) -> str | None:
    match = policy.match
    if match is None:
        return None
    if match.tags and not set(match.tags) & set(run.tags):
        return wording.policy_tags(policy.name, match.tags)
    if match.name and not fnmatch.fnmatchcase(run.name, match.name):
        return wording.policy_name(policy.name, match.name, run.name)
    if match.config:
        wanted = {f"config.{k}": v for k, v in match.config.items()}
        failing = first_failing(parse_conditions(wanted), run)
        if failing is not None:
            return wording.policy_when(policy.name, failing.describe())
    return None


def _applicability(
    rule: RuleSpec, run: Run, mismatch: str | None, unset: str | None
) -> Outcome | None:
    if mismatch:
        return Outcome(Status.SKIP, mismatch)
    if rule.off:
        return Outcome(Status.SKIP, wording.switched_off(rule.override))
    if unset:  # before `when`: a variant must not be skipped on a key the run lacks
        return Outcome(Status.ERROR, unset)
    failing = first_failing(list(rule.conditions), run)
    if failing is not None:
        found, value = run.lookup(failing.key)
        return Outcome(Status.SKIP, wording.not_applicable(failing.describe(), found, value))
    return None
