"""reach with a direction: "eval/loss gets below 1.0 by step 100" is one rule."""

from __future__ import annotations

import numpy as np

from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

DOWN = (
    "  - {id: r, metric: eval/loss,"
    " check: {reach: {value: 1.0, by_step: 100, direction: down}}}\n"
)


def test_reach_down_passes_when_the_loss_gets_below_the_bound(tmp_path):
    loss = np.linspace(3.0, 0.5, 120)  # crosses 1.0 at step 96
    r = judge(policy(tmp_path, DOWN), run_of(series("eval/loss", loss)))
    assert r.status is Status.PASS and r.step == 96 and "<= 1" in r.message
    assert judge_in_chunks(policy(tmp_path, DOWN), run_of(series("eval/loss", loss)), 7).step == 96


def test_reach_down_fails_with_the_lowest_mean_as_best(tmp_path):
    loss = np.linspace(3.0, 1.5, 120)
    r = judge(policy(tmp_path, DOWN), run_of(series("eval/loss", loss)))
    assert r.status is Status.FAIL and "never reached 1 by step 100" in r.message
    assert abs(r.value - loss[100]) < 1e-9 and r.step == 100
