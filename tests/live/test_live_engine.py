"""The engine fed poll by poll: the same verdict as a one-shot check, its state saved as
data mid-run (the daemon persists it), debounce across polls, and `stale` from the
watcher's clock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.gate import load
from gatekeeper.model import Run, Series
from gatekeeper.session import JudgingSession, judge_whole
from gatekeeper.verdict import Status
from tests.helpers import write_policy

POLICY = """
version: 1
name: live
rules:
  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0e-8}, for: 3}
  - {id: loss-mean, metric: train/loss, check: {max: 2}, reduce: mean, steps: {from: 0, to: 50}}
  - {id: loss-last, metric: train/loss, check: {max: 2}, steps: last}
  - {id: reward, metric: rollout/raw_reward, check: {reach: {value: 0.7, by_step: 80, window: 5}}}
  - {id: spike, metric: train/loss, check: {spike: {window: 10, factor: 8}}}
  - {id: trend, metric: train/loss, check: {trend: {window: 20, max_slope: 1.0}}}
  - {id: hung, metric: train/loss, check: {stale: {max_seconds: 60}}}
"""


def _series(n: int, bad: tuple[int, ...] = ()) -> dict[str, Series]:
    steps = np.arange(n, dtype=np.int64)
    kl = np.zeros(n)
    kl[list(bad)] = 0.5
    loss = 1.0 + 0.01 * np.sin(steps)
    reward = np.minimum(1.0, steps / 61.3)  # no mean lands exactly on the bound
    return {
        "train/ppo_kl": Series("train/ppo_kl", steps, kl, "train/step"),
        "train/loss": Series("train/loss", steps, loss, "train/step"),
        "rollout/raw_reward": Series("rollout/raw_reward", steps, reward, "rollout/step"),
    }


def _chunk(series: dict[str, Series], lo: int, hi: int) -> dict[str, Series]:
    return {m: Series(m, s.steps[lo:hi], s.values[lo:hi], s.step_key) for m, s in series.items()}


def _policies(tmp_path: Path):
    return load([str(write_policy(tmp_path / "p.yaml", POLICY))], [])


def test_fed_in_polls_and_saved_midway_equals_one_shot(tmp_path: Path) -> None:
    """A completed `watch` (the session fed poll by poll, its state saved as JSON and
    restored midway, as the daemon restarts) and `check` (the whole run as one poll)."""
    policies = _policies(tmp_path)
    whole = _series(120, bad=(30, 31, 90, 91, 92))
    meta = Run(name="r", source="mem")
    session = JudgingSession(policies, live=True)
    for lo in range(0, 60, 7):
        session.feed(_chunk(whole, lo, min(lo + 7, 60)), meta)
    saved = json.loads(json.dumps(session.to_state(), allow_nan=False))
    session = JudgingSession.from_state(policies, saved, live=True)  # the daemon's restart
    for lo in range(60, 120, 13):
        session.feed(_chunk(whole, lo, lo + 13), Run(name="r", source="mem"))
    live = session.verdict(final=True).results
    run = Run(name="r", source="mem", series=whole)
    shot = judge_whole(policies, run)[1].results
    assert shot == evaluate(policies, run, final=True).results
    # Sums over chunks and over the whole differ in the last bits: compare values approx.
    assert [(r.rule, r.status, r.step) for r in live] == [(r.rule, r.status, r.step) for r in shot]
    for a, b in zip(live, shot, strict=True):
        assert a.value == (b.value if b.value is None else pytest.approx(b.value, rel=1e-9)), a.rule
    kl = next(r for r in live if r.rule == "kl")
    assert (kl.status, kl.step) == (Status.FAIL, 92)  # two bad points at 30, 31 ignored


def test_for_3_counts_consecutive_points_across_polls(tmp_path: Path) -> None:
    ev = Evaluation(_policies(tmp_path))
    run = Run(name="r", source="mem")
    whole = _series(20, bad=(5, 6, 10, 11, 12))
    statuses = []
    for step in range(20):  # one point per poll
        ev.feed(_chunk(whole, step, step + 1))
        r = next(r for r in ev.verdict(run, final=False).results if r.rule == "kl")
        statuses.append(r.status)
    assert statuses[:12] == [Status.PASS] * 12
    assert statuses[12] is Status.FAIL


def test_stale_uses_the_watchers_clock_and_is_skipped_by_check(tmp_path: Path) -> None:
    ev = Evaluation(_policies(tmp_path))
    ev.feed(_chunk(_series(5), 0, 5))
    run = Run(name="r", source="mem")

    def hung(**kw) -> Status:
        return next(r for r in ev.verdict(run, **kw).results if r.rule == "hung").status

    assert hung(final=False, now=1000.0, arrivals={"train/loss": 990.0}) is Status.PASS
    assert hung(final=False, now=1061.0, arrivals={"train/loss": 1000.0}) is Status.FAIL
    assert hung(final=False) is Status.SKIP
    assert hung(final=True, now=5000.0, arrivals={"train/loss": 0.0}) is Status.PASS
