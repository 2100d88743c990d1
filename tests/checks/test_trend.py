"""trend: least-squares slope per step, or relative growth, over rolling windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gatekeeper.errors import PolicyError
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

GAP = "train/train_rollout_logprob_abs_diff"


def rule(args: str) -> str:
    return f"  - {{id: t, metric: {GAP}, check: {{trend: {args}}}}}\n"


def gap(n: int = 300, climb_from: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(5)
    values = 0.02 + rng.normal(0, 0.001, n)
    if climb_from is not None:
        values[climb_from:] += 0.001 * np.arange(n - climb_from)  # +0.001 per step
    return values


def test_a_climbing_logprob_gap_fails_and_a_steady_one_passes(tmp_path):
    pol = policy(tmp_path, rule("{window: 50, max_slope: 0.0005}"))
    steady = judge(pol, run_of(series(GAP, gap())))
    assert steady.status is Status.PASS and steady.judged == 251
    climbing = judge(pol, run_of(series(GAP, gap(300, 150))))
    assert climbing.status is Status.FAIL and 150 < climbing.step < 200
    assert "slope" in climbing.message and "/step" in climbing.message
    assert judge_in_chunks(pol, run_of(series(GAP, gap(300, 150))), 17).step == climbing.step


def test_slope_is_per_step_across_step_gaps(tmp_path):
    steps = np.arange(0, 200, 10)  # logged every 10 steps
    values = 0.01 * np.arange(steps.size)  # +0.01 per point = 0.001 per step
    tight = judge(
        policy(tmp_path, rule("{window: 5, max_slope: 0.0009}")), run_of(series(GAP, values, steps))
    )
    assert tight.status is Status.FAIL and math.isclose(tight.value, 0.001)
    loose = judge(
        policy(tmp_path, rule("{window: 5, max_slope: 0.0011}"), "l"),
        run_of(series(GAP, values, steps)),
    )
    assert loose.status is Status.PASS


def test_relative_growth_over_the_window(tmp_path):
    values = np.linspace(1.0, 2.0, 101)  # doubles over 100 steps
    pol = policy(tmp_path, rule("{window: 101, max_growth: 0.5}"))
    r = judge(pol, run_of(series(GAP, values)))
    assert r.status is Status.FAIL and math.isclose(r.value, 1.0 / 1.5)
    assert "growth" in r.message


def test_window_longer_than_the_data_and_nan(tmp_path):
    pol = policy(tmp_path, rule("{window: 50, max_slope: 0.1}"))
    short = run_of(series(GAP, gap(20)))
    assert judge(pol, short, final=False).status is Status.PENDING
    assert judge(pol, short).status is Status.ERROR
    values = gap(100)
    values[60] = math.nan
    r = judge(pol, run_of(series(GAP, values)))
    assert r.status is Status.ERROR and r.step == 60


def test_a_bound_is_required(tmp_path):
    with pytest.raises(PolicyError, match="trend needs a bound"):
        policy(tmp_path, rule("{window: 5}"))


def test_steps_spanning_more_than_int64_are_not_wrapped(tmp_path):
    """Steps fit int64 each, but from -9e18 to 9e18 their difference does not: a wrapped
    int64 difference made a rising series' slope negative, and `max_slope: 0` passed."""
    steps = np.linspace(-9e18, 9e18, 200).astype(np.int64)
    rising = np.linspace(1.0, 3.0, 200)
    pol = policy(tmp_path, rule("{window: 3, max_slope: 0}"))
    r = judge(pol, run_of(series(GAP, rising, steps)))
    assert r.status is Status.FAIL and r.value > 0
    assert judge_in_chunks(pol, run_of(series(GAP, rising, steps)), 7).status is Status.FAIL
    falling = judge(pol, run_of(series(GAP, rising[::-1], steps)))
    assert falling.status is Status.PASS


def test_step_shape_gap_does_not_wrap():
    """The largest gap between neighbours of steps wider apart than int64 (>64 points:
    the numpy path) is the true one, as the Python path for a few points gives."""
    from gatekeeper.engine.selection import step_shape

    steps = np.array([-(2**63), *range(100), 2**63 - 1], dtype=np.int64)
    assert step_shape(steps) == (-(2**63), 2**63 - 1, 2**63)  # from -2^63 to 0
    assert step_shape(steps[[0, 1, -1]]) == (-(2**63), 2**63 - 1, 2**63)


def test_values_near_the_float_limit_are_fitted_without_overflow(tmp_path):
    """Window sums of values near 1e308 overflowed: Inf - Inf made the slope NaN, and a
    NaN passes every bound (a rising 1e307 passed `max_slope: 0`). The fit is now taken
    of the values scaled down by a power of two, exactly: the same floats, scaled back."""
    rising = 1e307 * (1 + 0.05 * np.arange(100))
    pol = policy(tmp_path, rule("{window: 10, max_slope: 0}"))
    r = judge(pol, run_of(series(GAP, rising)))
    assert r.status is Status.FAIL and math.isclose(r.value, 5e305)
    assert judge_in_chunks(pol, run_of(series(GAP, rising)), 7).value == r.value
    grow = judge(
        policy(tmp_path, rule("{window: 10, max_growth: 0.01}"), "g"), run_of(series(GAP, rising))
    )
    assert grow.status is Status.FAIL and math.isclose(grow.value, 0.45 / 1.225)
    assert judge(pol, run_of(series(GAP, rising[::-1]))).status is Status.PASS


@pytest.mark.parametrize("contiguous", [True, False])
def test_the_scaled_fit_is_the_fit_scaled(contiguous):
    """Scaling by 2^k is exact: the fit of values x 2^1000 (which takes the scaled path)
    is the fit of the values, x 2^1000, bit for bit, on contiguous and gapped steps."""
    from gatekeeper.checks.trend import rolling_fit

    rng = np.random.default_rng(3)
    steps = np.arange(500) if contiguous else np.cumsum(rng.integers(1, 9, 500))
    values = rng.normal(1.0, 0.3, 500)
    slope, grow = rolling_fit(steps, values, 25)
    big_slope, big_grow = rolling_fit(steps, np.ldexp(values, 1000), 25)
    assert np.array_equal(big_slope, np.ldexp(slope, 1000))
    assert np.array_equal(big_grow, grow)
