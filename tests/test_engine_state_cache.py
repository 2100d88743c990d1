"""A tracker counts the times its state may have changed (`changes`, engine/tracker.py);
the daemon keeps each rule entry's JSON while that count stays (daemon/payload.py). One
path that changes a state without counting would save a stale state: a wrong verdict
after a restart. Over random polls of every check kind and selection — with restarts
from the saved row, config learned late (periods, bounds, metrics), templates, tail
rules, reductions, aggregates, the daemon's bounded evaluation and an unbounded one given
references — the row made of the kept JSON must equal `orjson.dumps` of a fresh one
after every poll and verdict; and each path that changes a state must count, on its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gatekeeper import __version__
from gatekeeper.checks import EvalContext
from gatekeeper.daemon import payload
from gatekeeper.engine import Evaluation, RuleTracker
from gatekeeper.model import Run, RunState, Series
from gatekeeper.policy.loader import load_policies
from tests.helpers import write_policy
from tests.live.test_live_equals_final import CASES, REFERENCE

RULES = """
  - {id: last, metric: m, steps: {last: 5}, check: {max: 0.7}}
  - {id: tail1, metric: m, steps: last, check: {finite: true}}
  - {id: listed, metric: m, steps: [3, 50, 119], check: {max: 0.7}}
  - {id: ranged, metric: m, steps: {from: 10, to: 60}, reduce: mean, check: {max: 0.7}}
  - {id: every, metric: m, steps: {every: 7}, check: {max: 0.7}}
  - {id: every-config, metric: m, steps: {every: config.period}, check: {max: 0.7}, for: 2}
  - {id: first, metric: m, steps: first, check: {max: 2}}
  - {id: mean, metric: m, reduce: mean, check: {max: 0.7}}
  - {id: bound, metric: m, reduce: max, check: {min: config.floor}}
  - {id: streak, metric: m, for: 3, check: {max: 0.52}}
  - {id: derived, expr: "m + n", check: {max: 5}}
  - {id: pattern, metric: "eval/*/x", check: {abs_max: 2}}
  - {id: named, metric: config.key, check: {finite: true}}
  - {id: absent, metric: never, check: {max: 1}}
"""


def _policies(tmp_path: Path) -> list[Any]:
    kinds = "".join(f"  - {{id: k-{k}, metric: m, check: {c}}}\n" for k, (c, _, _) in CASES.items())
    text = f"version: 1\nname: p\nrules:\n{kinds}{RULES}"
    return load_policies([str(write_policy(tmp_path / "p.yaml", text))])


def _poll(rng: np.random.Generator, lo: int, hi: int) -> dict[str, Series]:
    steps = np.arange(lo, hi, dtype=np.int64)
    values = 0.5 + rng.normal(0, 0.2, steps.size)
    values[rng.random(steps.size) < 0.05] = np.nan
    out = {
        "m": Series("m", steps, values, "train/step"),
        "n": Series("n", steps, values * 2, "train/step"),
    }
    if rng.random() < 0.5:
        out["eval/a/x"] = Series("eval/a/x", steps, values, "train/step")
    return out


def _run(i: int, ended: bool) -> Run:
    """The run's metadata: its config learned part by part (a period, a bound, a metric)."""
    config = {"period": 3} if i >= 4 else {}
    config |= {"floor": 0.1, "key": "n"} if i >= 8 else {}
    state = RunState.FINISHED if ended else RunState.RUNNING
    series = {m: Series.empty(m, "train/step") for m in ("m", "n")}
    return Run(name="r", source="mem", config=config, state=state, series=series)


def _assert_kept_is_fresh(ev: Evaluation) -> None:
    """The row made of the JSON kept per entry is the row made afresh."""
    fresh = {
        "format": payload.FORMAT,
        "state_version": payload.STATE_VERSION,
        "gatekeeper": __version__,
        "evaluation": ev.to_state(),
    }
    assert payload.dumps(ev) == orjson.dumps(fresh).decode()


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_states_equal_fresh_ones_over_random_polls(
    tmp_path: Path, bounded: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    policies = _policies(tmp_path)
    ev, hi = Evaluation(policies, bounded=bounded), 0
    refs = None if bounded else REFERENCE
    for i in range(14):
        lo, hi = hi, hi + int(rng.integers(0, 12))
        ended = i == 13
        run = _run(i, ended)
        ev.feed(_poll(rng, lo, hi), run)
        _assert_kept_is_fresh(ev)
        ev.verdict(run, final=ended and bool(rng.random() < 0.5), references=refs)
        _assert_kept_is_fresh(ev)
        if ev.reread() is not None:  # the daemon judges it again from its start
            ev, hi = Evaluation(policies, bounded=bounded), 0
        elif rng.random() < 0.3:  # a restart: from the row the daemon saved
            data = payload.loads(payload.dumps(ev), "state.db", "r")
            ev = payload.restore(policies, data, "state.db", "r")
            _assert_kept_is_fresh(ev)
    ev.verdict(_run(13, True), final=True, references=refs)
    _assert_kept_is_fresh(ev)


def _tracker(tmp_path: Path, rule: str, *, bounded: bool = False) -> RuleTracker:
    text = f"version: 1\nname: p\nrules:\n  - {{id: r, metric: m, {rule}}}\n"
    (spec,) = load_policies([str(write_policy(tmp_path / "p.yaml", text))])[0].rules
    tracker = RuleTracker(spec, bounded=bounded)
    tracker.feed(np.arange(10, dtype=np.int64), np.full(10, 0.5), "train/step")
    return tracker


def _kept_then(tracker: RuleTracker, change: Callable[[], object]) -> None:
    """One path changes the state, and counts it in `changes`."""
    before, count = orjson.dumps(tracker.to_state()), tracker.changes
    change()
    assert orjson.dumps(tracker.to_state()) != before  # the path did change the state
    assert tracker.changes > count


def test_every_path_that_changes_a_state_drops_the_kept_one(tmp_path: Path) -> None:
    """Each path on its own (in an Evaluation's verdict `bind`, on a change of the run's
    metadata, counts a change of every state and may hide a path that forgot to)."""
    steps, values = np.arange(10, 20, dtype=np.int64), np.full(10, 0.5)
    t = _tracker(tmp_path, "check: {max: 1}")
    _kept_then(t, lambda: t.feed(steps, values, "train/step"))
    _kept_then(t, lambda: t.see_axis(99))
    other = _tracker(tmp_path, "check: {max: 1}")
    other.feed(steps, values, "train/step")
    _kept_then(t := _tracker(tmp_path, "check: {max: 1}"), lambda: t.restore(other.to_state(), "r"))
    ctx = EvalContext(run=Run(name="r", source="mem"), metric="m", references=REFERENCE)
    t = _tracker(tmp_path, "steps: {last: 3}, check: {max: 1}")
    _kept_then(t, lambda: t.outcome(final=True, ctx=ctx))  # the tail judged: span, marked
    t = _tracker(tmp_path, "check: {isclose: {reference: ref, rel_tol: 1, abs_tol: 1}}")
    _kept_then(t, lambda: t.outcome(final=False, ctx=ctx))  # compared: its points dropped
    every = "steps: {every: config.k}, check: {max: 1}"
    t = _tracker(tmp_path, every, bounded=True)
    _kept_then(t, t.park)  # the period unknown: its waiting points only counted
    t = _tracker(tmp_path, every)
    _kept_then(t, lambda: t.bind(Run(name="r", source="mem", config={"k": 2})))
