"""History at the edges of a check: read the baselines a policy set needs before the
(pure) evaluation, decide trust and record the run after it.

A run is recorded `trusted` only when the gate passed and every history rule passed or
was inactive; an untrusted run is recorded too, but never enters a baseline.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gatekeeper.checks.history import INACTIVE, History, HistoryState
from gatekeeper.engine import Evaluation, RuleTracker
from gatekeeper.errors import ConfigError
from gatekeeper.history import open_store
from gatekeeper.history.base import Baselines, Coordinate, HistoryStore, RuleBaseline, RunRecord
from gatekeeper.model import Run
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.verdict import GateStatus, Status, Verdict

DEFAULT_SERIES_KEYS = ("name",)
ENV_URL = "GATEKEEPER_HISTORY"


@dataclass(frozen=True)
class HistoryOptions:
    url: str
    record: bool = False
    series_keys: tuple[str, ...] = DEFAULT_SERIES_KEYS
    run_id: str | None = None
    commit: str | None = None


def canonical(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the stable text of a key."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def series_identity(run: Run, keys: Iterable[str]) -> str:
    """Which runs share a baseline: the run's values for `keys` (run lookups like `name`,
    `config.backend`), as canonical JSON. A missing key is an error, never a wildcard."""
    ident: dict[str, Any] = {}
    for key in keys:
        found, value = run.lookup(key)
        if not found or value is None:
            raise ConfigError(
                f"history series key {key!r} is not set on run {run.name!r}; set it "
                f"(e.g. --config {key.removeprefix('config.')}=VALUE) or choose other --series-key"
            )
        ident[key] = value
    return canonical(ident)


def coordinate_prefix(rule: RuleSpec) -> tuple[str, str, str]:
    """(metric, steps_key, check_key): the rule's selection and check as written, so an
    edited declaration starts a fresh history and defaults never re-key a series."""
    steps_key = canonical(rule.steps.model_dump(mode="json", exclude_defaults=True))
    check_key = canonical({rule.check.kind: rule.check.model_dump(mode="json", exclude_unset=True)})
    return rule.metric, steps_key, check_key


def history_rules(policies: Iterable[PolicySpec]) -> list[RuleSpec]:
    return [r for p in policies for r in p.rules if isinstance(r.check, History)]


def read_baselines(store: HistoryStore, policies: list[PolicySpec], series: str) -> Baselines:
    rules: dict[str, RuleBaseline] = {}
    for rule in history_rules(policies):
        assert isinstance(rule.check, History)
        values = store.baseline(series, *coordinate_prefix(rule), limit=rule.check.last_n)
        positional = rule.steps.kind in ("tail", "last")
        rules[rule.key] = baseline = RuleBaseline(values, positional)
        baseline.stats(rule.check.last_n)  # computed here, at the edge, not while judging
    return Baselines(rules, store.display)


def observations(tracker: RuleTracker) -> dict[int, float]:
    """A history rule's finite selected values by coordinate step."""
    if tracker.rule.steps.kind in ("tail", "last"):
        n = tracker.rule.steps.count or 1
        if not tracker.tail:
            return {}
        values = np.concatenate([v for _, v in tracker.tail])[-n:]
        coords = range(-values.size, 0)
    else:
        state = tracker.agg_state
        assert isinstance(state, HistoryState)
        steps, values = state.points()
        coords = steps.tolist()
    return {
        int(c): float(v) for c, v in zip(coords, values.tolist(), strict=True) if np.isfinite(v)
    }


def trusted(verdict: Verdict, rule_keys: set[str]) -> bool:
    if verdict.status is not GateStatus.PASS:
        return False
    return all(
        r.status in (Status.PASS, Status.SKIP)
        for r in verdict.results
        if f"{r.policy}/{r.rule}" in rule_keys
    )


def make_record(
    ev: Evaluation, verdict: Verdict, series: str, run_id: str, commit: str | None
) -> RunRecord:
    keys = {r.key for r in history_rules(ev.policies)}
    skipped = {
        f"{r.policy}/{r.rule}"
        for r in verdict.results
        if r.status is Status.SKIP and not r.message.startswith(INACTIVE)
    }
    values: dict[Coordinate, float] = {}
    for tracker in ev.trackers:
        rule = tracker.rule
        if rule.key not in keys or rule.key in skipped:
            continue  # a rule that does not apply to this run has nothing to record
        prefix = coordinate_prefix(rule)
        for step, value in observations(tracker).items():
            values[Coordinate(*prefix, step)] = value  # shared coordinates collapse to one row
    return RunRecord(run_id, series, trusted(verdict, keys), values, commit)


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
    series = series_identity(run, opts.series_keys)
    with open_store(opts.url) as store:
        baselines = read_baselines(store, policies, series)
        ev = Evaluation(policies)
        ev.feed(run.series)
        verdict = ev.verdict(run, final=True, history=baselines)
        info: dict[str, Any] = {"store": store.display, "series": series, "recorded": False}
        if opts.record:
            rec = make_record(
                ev,
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
                values=len(rec.values),
                commit=rec.commit,
            )
    verdict.run["history"] = info
    return verdict


def summary(verdict: Verdict) -> str | None:
    """One line about what the history did, for the console."""
    info = verdict.run.get("history")
    if not info:
        return None
    if not info["recorded"]:
        return f"history: judged against {info['store']} (series {info['series']}); not recorded"
    trust = "trusted" if info["trusted"] else "UNTRUSTED (never enters a baseline)"
    return (
        f"history: recorded run {info['run_id']} as {trust}, {info['values']} value(s), "
        f"series {info['series']} in {info['store']}"
    )
