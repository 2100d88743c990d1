"""trend's window fit: the same floats whatever the chunks the points come in (a live
poll's fit is `check`'s, bit for bit), close to each window's own least-squares fit, and
exactly 0 on a metric that stands at its first value.

Until the twelfth session the fit took each window's sums as differences of running sums
from the first point it was given: a poll's sums started at its tail, `check`'s at the
run's first point, so the two rounded differently. A flat 0.001 under `max_slope: 0`
failed in `check` (a slope of 5e-19) and passed live."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gatekeeper.checks.trend import Trend, rolling_fit
from gatekeeper.verdict import Status
from tests.checks.util import judge, policy, run_of, series, whole_and_chunked


def reference_fit(steps: np.ndarray, values: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Each window fitted on its own, centred, in extended precision (np.longdouble)."""
    x = steps.astype(np.longdouble)
    y = values.astype(np.longdouble)
    wx = np.lib.stride_tricks.sliding_window_view(x, w)
    wy = np.lib.stride_tricks.sliding_window_view(y, w)
    dx = wx - wx.mean(axis=1, keepdims=True)
    dy = wy - wy.mean(axis=1, keepdims=True)
    slope = (dx * dy).sum(axis=1) / (dx * dx).sum(axis=1)
    mean = wy.mean(axis=1)
    span = wx[:, -1] - wx[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        growth = np.where(mean != 0, slope * span / np.abs(mean), 0.0)
    return slope.astype(np.float64), growth.astype(np.float64)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def values_of(rng: np.random.Generator, n: int, shape: int) -> np.ndarray:
    if shape == 0:
        return rng.normal(size=n)
    if shape == 1:
        return 0.02 + 1e-3 * np.arange(n) + rng.normal(0, 1e-4, n)  # a climb
    if shape == 2:
        return np.zeros(n)  # mean 0: growth 0
    if shape == 3:
        return 1e8 + rng.normal(size=n)  # a large level: cancellation in the sums
    return np.round(rng.normal(size=n), 2) * rng.choice([-1.0, 1.0], n)


def steps_of(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    start = int(rng.choice([0, 1, 7, 10**6, 2**40]))
    if kind == 0:
        return start + np.arange(n, dtype=np.int64)  # contiguous
    if kind == 1:
        return start + 10 * np.arange(n, dtype=np.int64)  # logged every 10 steps
    return start + np.cumsum(rng.integers(1, 4, n)).astype(np.int64)  # irregular


def fed(check: Trend, steps: np.ndarray, values: np.ndarray, cuts: list[int]):
    """The check's state fed the points cut at `cuts` (poll by poll)."""
    state = check.start()
    for lo, hi in itertools.pairwise([0, *cuts, steps.size]):
        state = check.feed(state, steps[lo:hi], values[lo:hi])
    return state


def outcome_of(state) -> tuple:
    return (state.windows, state.violations, state.first_bad, state.last)


@pytest.mark.parametrize("seed", range(4))
def test_a_window_has_the_same_fit_whatever_the_chunks(seed):
    """The fit of the windows from point j on, given the points from j - w + 1 on with
    their point number and the run's first point, is the whole run's, bit for bit; and
    a check fed in random polls ends in the state of the check fed whole."""
    rng = np.random.default_rng(seed)
    for trial in range(60):
        n = int(rng.integers(3, 2000))
        w = int(rng.integers(3, min(n, 300) + 1))
        steps, values = steps_of(rng, n, trial % 3), values_of(rng, n, trial % 5)
        slope, growth = rolling_fit(steps, values, w)
        origin = (int(steps[0]), float(values[0]))
        j = int(rng.integers(0, n - w + 1))  # the first window the part fits
        part_slope, part_growth = rolling_fit(
            steps[j:], values[j:], w, first=j, origin=origin)
        assert same_bits(part_slope, slope[j:]) and same_bits(part_growth, growth[j:]), trial
        check = Trend(window=w, max_slope=float(np.median(np.abs(slope))))
        cuts = sorted(set(rng.integers(1, n, int(rng.integers(1, 30))).tolist()))
        assert outcome_of(fed(check, steps, values, cuts)) == outcome_of(
            fed(check, steps, values, [])), (trial, n, w)


@pytest.mark.parametrize("seed", range(3))
def test_the_fit_is_each_windows_least_squares_fit(seed):
    """Within rounding of each window's own fit (extended precision, centred), on data
    whose level is within a few spreads of 0 and steps from anywhere up to 2^40."""
    rng = np.random.default_rng(100 + seed)
    for trial in range(60):
        n = int(rng.integers(3, 1500))
        w = int(rng.integers(3, min(n, 200) + 1))
        steps, values = steps_of(rng, n, trial % 3), values_of(rng, n, (0, 1, 4)[trial % 3])
        slope, growth = rolling_fit(steps, values, w)
        want_slope, want_growth = reference_fit(steps, values, w)
        scale = np.abs(values).max() / max(1, int(steps[-1] - steps[0]))  # a slope's size
        assert np.allclose(slope, want_slope, rtol=1e-9, atol=1e-9 * scale), (trial, n, w)
        # growth is slope x span over |mean|: compared where neither is near 0
        mean = np.lib.stride_tricks.sliding_window_view(values, w).mean(axis=1)
        far = (np.abs(want_slope) > 1e-6 * scale) & (np.abs(mean) > 1e-3 * np.abs(values).max())
        assert np.allclose(growth[far], want_growth[far], rtol=1e-6), (trial, n, w)


@pytest.mark.parametrize(("n", "w"), [(310_000, 5), (100_000, 1000)])
def test_long_runs_fit_alike_whole_and_polled(n, w):
    """Long runs, short and long windows: the polled state is the whole run's, and the
    fit is within rounding of each window's own."""
    rng = np.random.default_rng(n)
    steps, values = np.arange(n, dtype=np.int64), 2.0 + rng.normal(size=n)
    slope, _ = rolling_fit(steps, values, w)
    want, _ = reference_fit(steps[: 5 * w], values[: 5 * w], w)
    assert np.allclose(slope[: want.size], want, rtol=1e-9, atol=1e-12)
    check = Trend(window=w, max_slope=0.01)
    cuts = list(range(7, n, 9_973))
    assert outcome_of(fed(check, steps, values, cuts)) == outcome_of(fed(check, steps, values, []))


def test_hostile_series_and_steps_near_the_int64_end_fit_alike_whole_and_polled():
    """Signed zeros and subnormals, means of exactly 0, cancellation, ties, and a window
    as long as the series, on contiguous steps starting anywhere up to the int64 end."""
    rng = np.random.default_rng(20)
    for trial in range(300):
        n = int(rng.integers(3, 400))
        w = int(rng.integers(3, n + 1)) if trial % 7 else n
        start = int(rng.choice([0, 1, -5, 10**6, 2**40, 2**62, 2**63 - 1 - n]))
        steps = start + np.arange(n, dtype=np.int64)
        values = (
            rng.choice([0.0, -0.0, 5e-324, -5e-324], n),
            np.tile([1.0, -1.0], n)[:n],
            1e8 + rng.normal(size=n),
            np.round(rng.normal(size=n), 1),
        )[trial % 4]
        slope, growth = rolling_fit(steps, values, w)
        assert np.isfinite(slope).all() and np.isfinite(growth).all(), trial
        check = Trend(window=w, min_slope=-0.5, max_slope=0.5)
        cuts = sorted(set(rng.integers(1, n, 5).tolist()))
        assert outcome_of(fed(check, steps, values, cuts)) == outcome_of(
            fed(check, steps, values, [])), trial


@pytest.mark.parametrize("level", [0.001, 0.1, 0.3, 1.7, 123.456, 0.0, -2.5])
def test_a_metric_that_stands_still_has_slope_zero_whole_and_polled(tmp_path, level):
    """`max_slope: 0` and `min_slope: 0` on a metric logged at one value: every window's
    slope is exactly 0, so both pass, judged whole and poll by poll (before: the
    running sums' noise, 5e-19 at 0.001, failed `check` and passed live)."""
    n = 600
    run = run_of(series("train/gap", np.full(n, level), np.arange(n)))
    for bound in ("max_slope: 0", "min_slope: 0"):
        pol = policy(tmp_path, f"  - {{id: t, metric: train/gap, check: {{trend: "
                               f"{{window: 20, {bound}}}}}}}\n", "flat")
        got = whole_and_chunked(pol, run, (1, 10, 13, 400))
        assert {g[0] for g in got} == {Status.PASS} and len(set(got)) == 1, got
        assert "last slope 0/step" in judge(pol, run).message


RULES = [
    "{window: 20, max_slope: 0.002}",
    "{window: 20, min_slope: -0.002, max_slope: 0.002}",
    "{window: 15, max_growth: 0.02}",
    "{window: 30, min_growth: -0.05, max_slope: 0.01}",
]


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_are_the_same_whole_and_in_chunks(tmp_path, seed):
    """The verdict, message included, judged whole and fed 1, 13 and 400 points at a time
    (a NaN point: an ERROR at its step, never a pass)."""
    rng = np.random.default_rng(seed)
    n = 1500
    values = 1.0 + 0.001 * rng.normal(size=n).cumsum()
    climb = int(rng.integers(900, 1400))
    values[climb:] += 0.003 * np.arange(n - climb)  # the windows after it fail
    steps = steps_of(rng, n, seed % 3)
    runs = [run_of(series("train/gap", values, steps))]
    if seed % 2:
        at = int(rng.integers(200, n))
        values[at] = np.nan
        runs = [run_of(series("train/gap", values, steps)),
                run_of(series("train/gap", values[:at], steps[:at]))]
    for (i, args), run in itertools.product(enumerate(RULES), runs):
        rule = f"  - {{id: t, metric: train/gap, check: {{trend: {args}}}}}\n"
        got = whole_and_chunked(policy(tmp_path, rule, f"p{i}"), run, (1, 13, 400))
        assert len(set(got)) == 1, got
