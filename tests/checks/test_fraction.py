"""fraction: the share of points at or above / at or below a threshold."""

from __future__ import annotations

import numpy as np
import pytest

from gatekeeper.errors import PolicyError
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

CLIP = (
    "  - {id: c, metric: train/grad_norm,"
    " check: {fraction: {above: 1.0, max: 0.1, min_points: 20}}}\n"
)


def grad_norm(n: int, share_at_clip: float) -> np.ndarray:
    values = np.full(n, 0.4)
    values[:: int(round(1 / share_at_clip))] = 1.0  # clipped updates report the clip value
    return values


def test_grad_norm_repeatedly_at_the_clip(tmp_path):
    pol = policy(tmp_path, CLIP)
    r = judge(pol, run_of(series("train/grad_norm", grad_norm(100, 0.25))))
    # the observed value is the share of the run, not a point at a step
    assert r.status is Status.FAIL and r.value == 0.25 and r.step is None
    assert "share 25 of 100 points (25%) >= 1, expected at most 10%; first at step 0" in r.message
    assert (
        judge_in_chunks(pol, run_of(series("train/grad_norm", grad_norm(100, 0.25))), 9).value
        == 0.25
    )
    ok = judge(pol, run_of(series("train/grad_norm", grad_norm(100, 0.05))))
    assert ok.status is Status.PASS and ok.value == 0.05


def test_below_with_a_minimum_share(tmp_path):
    rule = "  - {id: c, metric: m, check: {fraction: {below: 0.0, min: 0.5}}}\n"
    r = judge(policy(tmp_path, rule), run_of(series("m", [-1, 1, 1, 1])))
    assert r.status is Status.FAIL and "expected at least 50%" in r.message


def test_too_few_points(tmp_path):
    run = run_of(series("train/grad_norm", grad_norm(10, 0.5)))
    assert judge(policy(tmp_path, CLIP), run, final=False).status is Status.PENDING
    r = judge(policy(tmp_path, CLIP), run)
    assert r.status is Status.ERROR and "needs 20 points" in r.message


def test_exactly_one_threshold(tmp_path):
    with pytest.raises(PolicyError, match="exactly one of above or below"):
        policy(
            tmp_path, "  - {id: c, metric: m, check: {fraction: {above: 1, below: 0, max: 0.1}}}\n"
        )


def test_live_share_waits_for_the_run_end_unless_asked(tmp_path):
    """A healthy HF run clips early and rarely later: 22 of the first 34 points at the clip,
    15 % of the whole run. Live the share is pending (a later point can change it); only
    `live: true` judges the share so far."""
    values = np.full(150, 0.5)
    values[:22] = 1.0
    run = run_of(series("train/grad_norm", values[:34]))
    rule = "  - {id: c, metric: train/grad_norm, check: {fraction: {above: 0.999, max: 0.2}}}\n"
    live = judge(policy(tmp_path, rule), run, final=False)
    assert live.status is Status.PENDING and "so far 22 of 34 points" in live.message
    whole = judge(policy(tmp_path, rule), run_of(series("train/grad_norm", values)))
    assert whole.status is Status.PASS and whole.value == pytest.approx(22 / 150)
    eager = rule.replace("max: 0.2}", "max: 0.2, live: true}")
    assert judge(policy(tmp_path, eager), run, final=False).status is Status.FAIL
    bounded = rule.replace("check:", "steps: {to: 20}, check:")
    assert judge(policy(tmp_path, bounded), run, final=False).status is Status.FAIL
