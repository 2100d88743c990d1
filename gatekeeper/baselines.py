"""History at the edges of a check: read the baselines a policy set needs before the
(pure) evaluation, decide trust and record the run after it.

A run is recorded `trusted` only when the gate passed and every history rule passed or
was inactive; an untrusted run is recorded too, but never enters a baseline.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gatekeeper import dburl
from gatekeeper.checks.baseline import Baselines, RuleBaseline
from gatekeeper.checks.history import INACTIVE, History
from gatekeeper.engine import RuleTracker
from gatekeeper.engine.selection import in_range
from gatekeeper.errors import ConfigError, quote
from gatekeeper.history import keys, open_store
from gatekeeper.history.base import HistoryStore, RunRecord
from gatekeeper.history.keys import canonical
from gatekeeper.model import Run
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.session import JudgingSession, judge_whole
from gatekeeper.verdict import GateStatus, Status, Verdict

DEFAULT_SERIES_KEYS = ("name",)
ENV_URL = "GATEKEEPER_HISTORY"
MILES_KEYS = {"config.test_path", "config.backend", "config.suite"}


@dataclass(frozen=True)
class HistoryOptions:
    url: str
    record: bool = False
    series_keys: tuple[str, ...] | None = None  # None: the policies' `series`, else name
    run_id: str | None = None
    commit: str | None = None


def series_keys(policies: list[PolicySpec], given: tuple[str, ...] | None) -> tuple[str, ...]:
    """`--series-key` if given, else the one `series` the history rules declare, else name."""
    if given:
        for key in given:
            if not key.strip(". ") or key.endswith(".") or len(key) > 200:
                raise ConfigError(f"--series-key {quote(key)}: expected run metadata that "
                                  "tells runs apart, like config.test_path or name")
        return given
    declared: dict[tuple[str, ...], RuleSpec] = {}
    for rule in history_rules(policies):
        assert isinstance(rule.check, History)
        if rule.check.series:
            declared.setdefault(tuple(rule.check.series), rule)
    if len(declared) > 1:
        (a, ra), (b, rb) = list(declared.items())[:2]
        raise ConfigError(
            f"history rules disagree on the run series: {list(a)} ({ra.source}) vs {list(b)} "
            f"({rb.source}); a run has one series: declare the same keys or pass --series-key"
        )
    return next(iter(declared), DEFAULT_SERIES_KEYS)


def series_identity(run: Run, keys: Iterable[str]) -> str:
    """Which runs share a baseline: the run's values for `keys` (run lookups like `name`,
    `config.backend`), as canonical JSON. A missing key is an error, never a wildcard;
    miles' test_path/backend/suite fall back to what a miles record's path tells."""
    ident: dict[str, Any] = {}
    from_path: dict[str, str] | None = None
    for key in keys:
        found, value = run.lookup(key)
        if (not found or value is None) and key in MILES_KEYS:
            if from_path is None:
                from gatekeeper.history.miles import identity_from_path

                from_path = identity_from_path(run.source) or {}
            value = from_path.get(key.removeprefix("config."))
            found = value is not None
        if not found or value is None:
            raise ConfigError(
                f"history series key {key!r} is not set on run {run.name!r}; set it "
                f"(e.g. --config {key.removeprefix('config.')}=VALUE) or choose other --series-key"
            )
        ident[key] = value
    return canonical(ident)


def miles_declared(run: Run) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """What a miles test declares with `register_ci_gate` and where that was read: the
    run's `config.ci_gate` (a list of metric keys) if set, else the test file found from
    the record's path. Neither is an error naming the flag: never a silent default."""
    found, given = run.lookup("config.ci_gate")
    if found and given is not None:
        if not (isinstance(given, list) and all(isinstance(m, str) for m in given)):
            raise ConfigError(
                f"--config ci_gate={given!r}: expected a list of metric keys, e.g. "
                "--config 'ci_gate=[train/grad_norm, train/ppo_kl]'"
            )
        return [(m, {}) for m in given], "config.ci_gate"
    from gatekeeper.history.miles import declared_gates, identity_from_path

    ident = identity_from_path(run.source)
    if ident is None:
        raise ConfigError(
            f"run {run.name!r}: which metrics the miles test gates is unknown (its "
            "register_ci_gate calls); run in the miles checkout or pass "
            "--config 'ci_gate=[train/grad_norm, train/ppo_kl]'"
        )
    return declared_gates(ident["test_path"]), ident["test_path"]


def scope_to_declared(policies: list[PolicySpec], run: Run) -> list[PolicySpec]:
    """miles judges only the metrics a test declares (`register_ci_gate`, GATE_DEFAULTS
    filling what the call leaves out): a history rule no declaration names is switched
    off with that reason; a declared metric the run never logged stays an ERROR (the
    rule has no if_logged), which untrusts the run as in miles' gate. A declaration no
    rule can judge (another metric, or its own steps/constraint) is refused."""
    declared, where = miles_declared(run)
    rules = history_rules(policies)
    on: set[str] = set()
    for metric, written in declared:
        hits = [r.key for r in rules if r.metric == metric and _literals_match(r, written)]
        if not hits:
            raise ConfigError(
                f"{where}: register_ci_gate(metric_key={metric!r}"
                + "".join(f", {k}={v!r}" for k, v in written.items())
                + ") has no history rule with that metric, steps and constraint in the "
                "given policies; add one (policies/miles/history.yaml shows the form)"
            )
        on.update(hits)
    reason = f"not declared by register_ci_gate in {where} (miles gates declared metrics only)"
    return [
        replace(p, rules=tuple(
            replace(r, off=True, override=reason)
            if isinstance(r.check, History) and r.key not in on else r
            for r in p.rules
        ))
        for p in policies
    ]


def _literals_match(rule: RuleSpec, written: dict[str, Any]) -> bool:
    """A declaration's written steps/constraint literals key as the rule's do."""
    _, steps, check = coordinate_prefix(rule)
    return (
        ("steps" not in written or canonical(written["steps"]) == steps)
        and ("constraint" not in written or canonical(written["constraint"]) == check)
    )


def coordinate_prefix(rule: RuleSpec) -> tuple[str, str, str]:
    """(metric, steps_key, check_key): the rule's selection and band as written, in miles'
    key form (gatekeeper/history/keys.py), so an edited declaration starts a fresh
    history, defaults never re-key a series and a miles history imports as it is."""
    steps_key = keys.steps_key(rule.steps.model_dump(mode="json", exclude_defaults=True))
    check_key = keys.check_key(rule.check.model_dump(mode="json", exclude_unset=True))
    return rule.metric, steps_key, check_key


def history_rules(policies: Iterable[PolicySpec]) -> list[RuleSpec]:
    return [r for p in policies for r in p.rules if isinstance(r.check, History)]


def needed_steps(rule: RuleSpec, run: Run) -> np.ndarray | None:
    """The coordinates this run will judge (None: unknown, e.g. a derived metric), so the
    read stops once each has its `last_n` values."""
    if rule.expr is not None:
        return None
    s = run.series.get(rule.metric)
    steps = s.steps if s is not None else np.empty(0, np.int64)
    sel = rule.steps
    if sel.kind in ("tail", "last"):
        return np.arange(-min(sel.count or 1, steps.size), 0, dtype=np.int64)
    if sel.kind == "list":
        return np.asarray(sel.steps, dtype=np.int64)
    if sel.kind == "first":
        return steps[:1]
    if sel.kind == "range":
        return steps[in_range(sel, steps)]
    return steps


def read_baselines(
    store: HistoryStore | None, policies: list[PolicySpec], series: str,
    run: Run | None = None, shown: str = "",
) -> Baselines:
    """Each history rule's trusted rows of `series`; none where there is no `store` yet
    (a SQLite file not created: `shown` names it)."""
    rules: dict[str, RuleBaseline] = {}
    for rule in history_rules(policies):
        assert isinstance(rule.check, History)
        needed = needed_steps(rule, run) if run is not None else None
        rows = [] if store is None else store.baseline_rows(
            series, *coordinate_prefix(rule), limit=rule.check.last_n, needed=needed
        )
        positional = rule.steps.kind in ("tail", "last")
        rules[rule.key] = baseline = RuleBaseline(positional=positional, rows=rows)
        baseline.stats(rule.check.last_n)  # computed here, at the edge, not while judging
    return Baselines(rules, shown if store is None else store.display)


def observations(tracker: RuleTracker) -> tuple[np.ndarray, np.ndarray]:
    """A history rule's finite selected values by coordinate step (sorted)."""
    return tracker.observations()


def trusted(verdict: Verdict, rule_keys: set[str]) -> bool:
    """A run fit to be a baseline: no gating failure and no history rule failing. A run
    that judged nothing (a cold start: every history rule inactive) is trusted, or no
    baseline could ever begin."""
    if verdict.status not in (GateStatus.PASS, GateStatus.NOTHING):
        return False
    return all(
        r.status in (Status.PASS, Status.SKIP)
        for r in verdict.results
        if f"{r.policy}/{r.rule}" in rule_keys
    )


def make_record(
    session: JudgingSession, verdict: Verdict, series: str, run_id: str, commit: str | None
) -> RunRecord:
    rule_keys = {r.key for r in history_rules(session.policies)}
    # Nothing to record from a rule that does not apply (SKIP, not inactive), nor from one
    # that could not be judged (ERROR: miles writes no value for a spec whose selection
    # failed; the run is untrusted anyway).
    leave_out = {
        f"{r.policy}/{r.rule}"
        for r in verdict.results
        if (r.status is Status.SKIP and not r.message.startswith(INACTIVE))
        or r.status is Status.ERROR
    }
    points: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
    for tracker in session.trackers:
        rule = tracker.rule
        if rule.key not in rule_keys or rule.key in leave_out:
            continue
        steps, values = observations(tracker)
        if steps.size > 1 and bool(np.any(steps[1:] == steps[:-1])):
            continue  # duplicate steps are an ERROR verdict, never a stored value
        # rules sharing a coordinate select the same values: one row, never double weight
        points.setdefault(coordinate_prefix(rule), (steps, values))
    return RunRecord(run_id, series, trusted(verdict, rule_keys), points, commit)


def default_run_id(run: Run) -> str:
    return run.run_id or f"{run.name}-{uuid.uuid4().hex[:12]}"


def default_commit(run: Run) -> str | None:
    found, value = run.lookup("config.commit")
    if found and value is not None:
        return str(value)
    return os.environ.get("GITHUB_SHA") or None


def judge(policies: list[PolicySpec], run: Run, opts: HistoryOptions) -> Verdict:
    """Read baselines, judge the finished run, record it if asked. The verdict's run
    summary gains a `history` entry saying what was read and written."""
    skeys = series_keys(policies, opts.series_keys)
    series = series_identity(run, skeys)
    if MILES_KEYS <= set(skeys):  # a miles identity: miles' scope, the declared metrics
        policies = scope_to_declared(policies, run)
    if not opts.record and (absent := absent_sqlite(opts.url)) is not None:
        # judged against no history, and nothing created: a read writes nothing
        baselines = read_baselines(None, policies, series, run, absent)
        verdict = judge_whole(policies, run, history=baselines)[1]
        verdict.run["history"] = {"store": absent, "series": series, "recorded": False,
                                  "absent": True}
        return verdict
    with open_store(opts.url) as store:
        baselines = read_baselines(store, policies, series, run)
        session, verdict = judge_whole(policies, run, history=baselines)
        info: dict[str, Any] = {"store": store.display, "series": series, "recorded": False}
        if opts.record:
            rec = make_record(
                session,
                verdict,
                series,
                opts.run_id or default_run_id(run),
                opts.commit or default_commit(run),
            )
            store.record(rec)
            info.update(
                recorded=True,
                run_id=rec.run_id,
                trusted=rec.trusted,
                values=rec.n_values,
                commit=rec.commit,
            )
    verdict.run["history"] = info
    return verdict


def absent_sqlite(url: str) -> str | None:
    """The file a SQLite store URL names, when it is not there yet (else None)."""
    try:
        found = dburl.parse(url)
    except ValueError:
        return None  # open_store says what is wrong with it
    if found.engine != "sqlite" or os.path.exists(found.path):
        return None
    return found.path


def summary(verdict: Verdict) -> str | None:
    """One line about what the history did, for the console."""
    info = verdict.run.get("history")
    if not info:
        return None
    if info.get("absent"):
        return (f"history: no store at {info['store']} yet (nothing read, nothing created; "
                "--record makes it); not recorded")
    if not info["recorded"]:
        return f"history: judged against {info['store']} (series {info['series']}); not recorded"
    trust = "trusted" if info["trusted"] else "UNTRUSTED (never enters a baseline)"
    return (
        f"history: recorded run {info['run_id']} as {trust}, {info['values']} value(s), "
        f"series {info['series']} in {info['store']}"
    )
