"""Apply policies to a run. Pure: no clock, no network, no files.

`evaluate(policies, run, final=...)` judges a whole run. Live watchers keep an
`Evaluation` and `feed` it only the new points of each poll (O(new points)); its
`verdict` is the same function of all points fed so far.

A rule is a pipeline (docs/architecture.md, "The rule pipeline"): what the run's
metadata decides (applicability.py, once per change of it), then per rule its
selection (selection.py), reduction (reduction.py) or point-by-point judgement
(judgement.py), in the words of wording.py; tracker.py holds a rule's stages and state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from gatekeeper.checks import AggregateCheck, EvalContext, Outcome
from gatekeeper.engine import selection
from gatekeeper.engine.applicability import Applicability
from gatekeeper.engine.judgement import severity
from gatekeeper.engine.selection import step_shape
from gatekeeper.engine.tracker import RuleTracker
from gatekeeper.model import Run, Series
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.run_state import run_state_result
from gatekeeper.statedata import StateDataError, decode
from gatekeeper.verdict import Mode, RuleResult, Status, Verdict

if TYPE_CHECKING:  # expr.py is imported when a rule has an expression
    from gatekeeper.expr import Aligner

__all__ = ["Evaluation", "RuleTracker", "evaluate"]


class Evaluation:
    """Rule trackers for a set of policies on one run; feed new points, ask for a verdict.

    `bounded` (the daemon): what it keeps is bounded by the rules' windows, not by the
    run's length. Its verdicts are never given a history store or reference runs, so a
    `history` or `isclose` rule keeps its first point only (its outcome is the SKIP or
    ERROR saying so whatever the points); and a `steps: {every: config.k}` selection whose
    period a verdict found unknown counts its points instead of keeping them: a period
    learned later sets `reread()`, and the caller judges the run again from its start.
    Its verdicts equal an unbounded evaluation's on the same points and metadata."""

    def __init__(self, policies: Iterable[PolicySpec], *, bounded: bool = False):
        self.policies = list(policies)
        self.bounded = bounded
        self.trackers: list[RuleTracker] = [
            RuleTracker(r, bounded=bounded) for p in self.policies for r in p.rules
        ]
        self.by_metric: dict[str, list[RuleTracker]] = {}
        self.derived: list[tuple[Aligner, RuleTracker]] = []  # expr rules: inputs aligned first
        self.axis_last: dict[str, int] = {}  # step axis -> last step of any metric on it
        # what the run's metadata decides, worked out again only when it changes
        self.applicability = Applicability(self.policies, self.trackers)
        for tracker in self.trackers:
            if tracker.rule.expr is not None:
                from gatekeeper.expr import Aligner

                self.derived.append((Aligner(tracker.rule.expr), tracker))
            else:
                self.by_metric.setdefault(tracker.rule.metric, []).append(tracker)

    # ---- state as data -----------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """What has been fed, as plain data: per rule its tracker, per derived rule its
        aligner's buffered inputs, and the last step of each step axis."""
        return {
            "bounded": self.bounded,
            "rules": [{"key": t.rule.key, "tracker": t.to_state()} for t in self.trackers],
            "aligners": [a.to_state() for a, _ in self.derived],
            "axis_last": dict(self.axis_last),
        }

    @classmethod
    def from_state(cls, policies: Iterable[PolicySpec], data: Any) -> Evaluation:
        """An Evaluation of `policies` holding what `to_state` saved (StateDataError when
        the data does not fit these policies' rules)."""
        keys = {"bounded", "rules", "aligners", "axis_last"}
        if not isinstance(data, dict) or set(data) != keys:
            raise StateDataError(f"evaluation: expected a mapping of {', '.join(sorted(keys))}")
        ev = cls(policies, bounded=decode(data["bounded"], bool, "evaluation.bounded"))
        rules, aligners = data["rules"], data["aligners"]
        if not isinstance(rules, list) or not isinstance(aligners, list):
            raise StateDataError("evaluation: rules and aligners must be lists")
        if len(rules) != len(ev.trackers) or len(aligners) != len(ev.derived):
            raise StateDataError("evaluation: its rules are not these policies' rules")
        for i, (tracker, saved) in enumerate(zip(ev.trackers, rules, strict=True)):
            where = f"evaluation.rules[{i}]"
            if not isinstance(saved, dict) or saved.get("key") != tracker.rule.key:
                raise StateDataError(f"{where}: not rule {tracker.rule.key}")
            tracker.restore(saved.get("tracker"), f"{where}.tracker")
        for i, ((aligner, _), saved) in enumerate(zip(ev.derived, aligners, strict=True)):
            aligner.restore(saved, f"evaluation.aligners[{i}]")
        ev.axis_last = decode(data["axis_last"], dict[str, int], "evaluation.axis_last")
        return ev

    def feed(self, series: Mapping[str, Series]) -> None:
        """Fold new points (per metric, sorted by step) into every rule that reads them."""
        for part in series.values():
            if len(part):
                hi = int(part.steps[-1])
                self.axis_last[part.step_key] = max(self.axis_last.get(part.step_key, hi), hi)
        shapes: dict[int, tuple[int, int, int]] = {}  # by steps array: a row's metrics share one
        for metric, trackers in self.by_metric.items():
            s = series.get(metric)
            if s is not None and len(s):
                shape = shapes.get(id(s.steps))  # once per steps array, not per rule
                if shape is None:
                    shape = shapes[id(s.steps)] = step_shape(s.steps)
                finite = bool(np.isfinite(s.values).all())
                for tracker in trackers:
                    tracker.feed(s.steps, s.values, s.step_key, shape, finite)
        for aligner, tracker in self.derived:
            new = aligner.feed(series)
            if new is not None:
                tracker.feed(new[0], new[1], aligner.step_key or "step")

    def reread(self) -> str | None:
        """Why the run must be judged again from its start, or None: a bounded evaluation
        learned a period after counting points it would select, or (any evaluation) the
        run's config changed a period after points were judged by it. The daemon re-reads
        the run; `watch` keeps judging by the first period."""
        for tracker in self.trackers:
            if tracker.selection.reread is not None:
                return f"rule {tracker.rule.key}: {tracker.selection.reread}"
        return None

    def verdict(
        self,
        run: Run,
        *,
        final: bool,
        history: Any = None,
        now: float | None = None,
        arrivals: Mapping[str, float] | None = None,
        references: Mapping[str, Run] | None = None,
    ) -> Verdict:
        """`now` and `arrivals` (metric -> wall time its last new point arrived) come from
        a live watcher, for `stale` rules; without them those rules are skipped.
        `references` are earlier runs by name, for `isclose` rules."""
        arrivals = arrivals or {}
        if self.bounded and (history is not None or references):
            raise ValueError("a bounded evaluation keeps no points for history or references")
        self.applicability.update(run)
        if self.bounded:
            for tracker in self.trackers:
                selection.park(tracker.selection, tracker.rule.steps)
        results: list[RuleResult] = []
        for tracker, before in zip(self.trackers, self.applicability.before, strict=True):
            rule, outcome, overlay = tracker.rule, before, None
            if outcome is None:
                rule_ctx = _context(  # built directly: replace() costs ~10 us a rule
                    run=run, history=history, rule_key=rule.key, now=now,
                    last_arrival=arrivals.get(rule.metric), metric=rule.metric,
                    references=references,
                )
                tracker.selection.axis_last = self.axis_last.get(tracker.step_key or "")
                outcome = tracker.outcome(final=final, ctx=rule_ctx)
                if isinstance(rule.check, AggregateCheck) and outcome.status is not Status.SKIP:
                    overlay = rule.check.overlay(tracker.agg_state, rule_ctx)
            results.append(_result(rule, outcome, tracker, overlay))
        allowed = self.applicability.allowed  # run states relaxed by the policies that apply
        ended = run_state_result(run, final=final, allowed=allowed)  # how the run ended
        if ended is not None:
            results.append(ended)
        nothing = _nothing_allowed(self.policies, run)
        return Verdict(run=run.summary(), results=results, final=final, nothing_allowed=nothing)


def evaluate(
    policies: Iterable[PolicySpec],
    run: Run,
    *,
    final: bool = True,
    history: Any = None,
    references: Mapping[str, Run] | None = None,
) -> Verdict:
    """Judge a whole run against the policies."""
    ev = Evaluation(policies)
    ev.feed(run.series)
    return ev.verdict(run, final=final, history=history, references=references)


def _nothing_allowed(policies: Iterable[PolicySpec], run: Run) -> str | None:
    """Why a verdict that judges no gating rule may pass: the flag, else an enforce-mode
    policy's `allow_nothing_judged` -- whether or not its `match:` holds, as a policy
    that does not apply to this run is the usual reason nothing was judged. A shadow
    policy's counts only when every policy is shadow (a report-only gate, such as miles'
    history gate): it never excuses an enforce policy that judged nothing."""
    if run.allow_nothing_judged is not None:
        return run.allow_nothing_judged
    policies = list(policies)
    only_shadow = all(p.mode is Mode.SHADOW for p in policies)
    for p in policies:
        if p.allow_nothing_judged is not None and (p.mode is Mode.ENFORCE or only_shadow):
            return f"policy {p.name}: {p.allow_nothing_judged}"
    return None


def _context(**values: Any) -> EvalContext:
    """`EvalContext(**values)` given every field, without the frozen dataclass's
    `object.__setattr__` per field (~2 us a rule on every verdict); equal to it in every
    way (tests/test_engine.py pins that)."""
    ctx = object.__new__(EvalContext)
    ctx.__dict__.update(values)
    return ctx


def _plot(tracker: RuleTracker, overlay: dict[str, list[float]] | None) -> dict[str, Any]:
    """What a plot of the rule needs beyond the outcome: bound parameters, the judged
    selection and the violating steps (reporters draw; the engine only records)."""
    if tracker.plot_params is None:  # dumped once: a live verdict is asked on every poll
        check, rule = tracker.rule.check, tracker.rule
        params = {"kind": check.kind, **check.model_dump(mode="json")}
        value = params.get("value")
        if rule.check_from is not None and isinstance(value, float) and value != value:
            params["value"] = rule.check_from  # not bound to a run: the key, never a NaN
        tracker.plot_params = params
    violating: tuple[int, ...] = tracker.marked  # ints already (_judge_finite, decode)
    if overlay is not None:  # an aggregate check's own violating steps (history: drifting)
        overlay = dict(overlay)
        drift = overlay.pop("drift", None) or []
        violating = tuple(int(s) for s in (tracker.marked or drift))
    return {
        "check": dict(tracker.plot_params),  # each result its own copy
        "span": tracker.span,
        "violating_steps": violating,
        "overlay": overlay,
    }


def _result(
    rule: RuleSpec, out: Outcome, tracker: RuleTracker, overlay: dict[str, list[float]] | None
) -> RuleResult:
    return RuleResult.of(  # every field given: no per-field frozen setattr
        policy=rule.policy,
        rule=rule.id,
        status=severity(rule, out.status),
        severity=rule.severity,
        mode=rule.mode,
        metric=rule.metric,
        message=out.message,
        source=rule.source,
        step=out.step,
        step_key=tracker.step_key,
        value=out.value,
        expected=tracker.expected(),
        override=rule.override,
        description=rule.description,
        violations=out.violations,
        judged=out.judged,
        **_plot(tracker, overlay),
        not_judged=out.not_judged,
    )
