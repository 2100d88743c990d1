"""flat: collapse, the spread of a window below a floor."""

from __future__ import annotations

import numpy as np
import pytest

from gatekeeper.errors import PolicyError
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

STD = "  - {id: f, metric: rollout/raw_reward, check: {flat: {window: 20, min_std: 0.005}}}\n"


def reward(n: int = 200, collapse_at: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(7)
    values = 0.5 + rng.normal(0, 0.05, n)
    if collapse_at is not None:
        values[collapse_at:] = 0.98  # saturates at one value
    return values


def test_reward_saturating_at_one_value_fails_once_a_window_is_flat(tmp_path):
    r = judge(policy(tmp_path, STD), run_of(series("rollout/raw_reward", reward(200, 120))))
    assert r.status is Status.FAIL and r.step == 139  # the first all-flat 20-point window
    assert "flat: std < 0.005" in r.message


def test_healthy_noise_passes_and_polls_agree(tmp_path):
    pol = policy(tmp_path, STD)
    run = run_of(series("rollout/raw_reward", reward()))
    whole = judge(pol, run)
    assert whole.status is Status.PASS and whole.judged == 181
    collapsed = run_of(series("rollout/raw_reward", reward(200, 120)))
    assert judge_in_chunks(pol, collapsed, 13).step == judge(pol, collapsed).step


def test_range_floor_and_constant_series(tmp_path):
    rule = "  - {id: f, metric: m, check: {flat: {window: 5, min_range: 0.1}}}\n"
    r = judge(policy(tmp_path, rule), run_of(series("m", np.full(10, 3.0))))
    assert r.status is Status.FAIL and r.step == 4 and "max-min < 0.1" in r.message


def test_window_longer_than_the_data(tmp_path):
    pol = policy(tmp_path, STD)
    run = run_of(series("rollout/raw_reward", reward(10)))
    assert judge(pol, run, final=False).status is Status.PENDING
    r = judge(pol, run)
    assert r.status is Status.ERROR and "needs 20 points" in r.message


def test_exactly_one_floor(tmp_path):
    with pytest.raises(PolicyError, match="exactly one of min_std or min_range"):
        policy(tmp_path, "  - {id: f, metric: m, check: {flat: {window: 5}}}\n")
