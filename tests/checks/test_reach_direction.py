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


def _reach(tmp_path, params: str):
    return policy(tmp_path, f"  - {{id: r, metric: m, check: {{reach: {{{params}}}}}}}\n")


def test_a_window_mean_is_not_a_difference_of_running_sums(tmp_path):
    """Found by tests/fuzz/test_verdict_oracle.py: the k-point means were differences of
    a cumulative sum, so after a 1e16 a 0.7 came out 0.0 (the sum's ulp is 2) and a loss
    that never got below 0.5 passed `reach ... direction: down` -- a silent pass; going up,
    a -1.0 read as 0.0 passed `value: -0.5`. Each window is summed from its own points."""
    down = _reach(tmp_path, "value: 0.5, by_step: 1, direction: down")
    r = judge(down, run_of(series("m", [1e16, 0.7])))
    assert r.status is Status.FAIL and r.value == 0.7, r.message
    up = _reach(tmp_path, "value: -0.5, by_step: 1")
    assert judge(up, run_of(series("m", [-1e16, -1.0]))).status is Status.FAIL
    two = _reach(tmp_path, "value: 0.5, by_step: 3, window: 2, direction: down")
    r = judge(two, run_of(series("m", [1e16, 0.7, 0.5, 0.7])))
    assert r.status is Status.FAIL and r.value == 0.6, r.message


def test_a_window_mean_of_finite_points_does_not_overflow(tmp_path):
    """Two points of 1.7e308 summed to Inf, and Inf >= 1.79e308 passed; their mean is
    1.7e308, which does not reach it."""
    top = _reach(tmp_path, "value: 1.7976931348623157e308, by_step: 1, window: 2")
    r = judge(top, run_of(series("m", [1.7e308, 1.7e308])))
    assert r.status is Status.FAIL and r.value == 1.7e308, r.message


def test_reach_judges_alike_whatever_the_polls(tmp_path):
    """The count of judged points stopped once the mean was reached in a poll, but not in
    the whole run (7 vs 4 judged), and a window's mean depended on where the poll began."""
    pols = _reach(tmp_path, "value: 0.0, by_step: 30, window: 4")
    values = [-1.0, 0.8, -0.6, 1.0, -0.1, 1.4, 0.0, 0.1, 1e16, 0.3, 0.1]
    run = run_of(series("m", values))
    whole = judge(pols, run)
    for chunk in (1, 2, 3, 5):
        fed = judge_in_chunks(pols, run, chunk)
        got = (fed.status, fed.step, fed.value, fed.judged, fed.message)
        assert got == (whole.status, whole.step, whole.value, whole.judged, whole.message)
    assert whole.judged == len(values)


def test_a_run_that_ended_before_the_deadline_is_skipped_with_the_reason(tmp_path):
    """"above 0.75 within 80 steps" makes no claim about a 50-step run: skip, never fail;
    the same run reaching the bound passes, and one that passed step 80 short of it fails."""
    up = _reach(tmp_path, "value: 0.75, by_step: 80, window: 5")
    r = judge(up, run_of(series("m", np.full(50, 0.5))))
    assert r.status is Status.SKIP and "ended at step 49, before step 80" in r.message
    assert judge(up, run_of(series("m", np.full(50, 0.8)))).status is Status.PASS
    assert judge(up, run_of(series("m", np.full(90, 0.5)))).status is Status.FAIL
