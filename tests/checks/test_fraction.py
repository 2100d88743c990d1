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
    assert r.status is Status.FAIL and r.value == 0.25 and r.step == 0
    assert "25 of 100 points (25%) >= 1, expected at most 10%" in r.message
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
