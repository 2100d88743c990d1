"""trend's contiguous fit in C (`gatekeeper/checks/_trend.c`) against its numpy path.

Every comparison computes `rolling_fit` twice, with `trend.USE_C` on and off, and
requires the very same floats bit for bit (slope and growth, all windows or the last
one): random series of every shape the reference tests use, and hostile ones (signed
zeros, subnormals, values near the float limit whose sums overflow to inf and NaN, mean
exactly 0, window = length), steps starting anywhere up to near the int64 limit.
Steps that are not contiguous must be handed back (the kernel says False, the general
formula judges). Verdicts fed whole and poll by poll (tests/checks/util.py) must be the
numpy path's. tests/test_extensions_built.py
requires the extension to be built where a compiler is.
"""

from __future__ import annotations

import numpy as np
import pytest

from gatekeeper.checks import trend
from gatekeeper.checks.trend import rolling_fit
from tests.checks.util import policy, run_of, series, whole_and_chunked

_trend = trend._trend
needs_c = pytest.mark.skipif(_trend is None, reason="gatekeeper.checks._trend not built")


def numpy_fit(steps, values, w, *, growth=True):
    trend.USE_C = False
    try:
        with np.errstate(all="ignore"):
            return rolling_fit(steps, values, w, growth=growth)
    finally:
        trend.USE_C = True


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def kernel_takes(steps, values, w, growth) -> bool:
    m = values.size - w + 1
    slope, grow = np.full(m, 7.0), np.full(m if growth else 1, 7.0)
    took = _trend.fit(steps, values, w, slope, grow, growth)
    if not took:  # nothing written
        assert (slope == 7.0).all() and (grow == 7.0).all()
    return bool(took)


def same(steps, values, w, *, c: bool = True) -> None:
    for growth in (True, False):
        with np.errstate(all="ignore"):
            got = rolling_fit(steps, values, w, growth=growth)
        want = numpy_fit(steps, values, w, growth=growth)
        assert same_bits(got[0], want[0]), (w, values.size, growth)
        assert same_bits(got[1], want[1]), (w, values.size, growth)
        assert kernel_takes(steps, values, w, growth) is c


def hostile(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    if kind == 0:
        return rng.normal(size=n) * 10.0 ** rng.uniform(-300, 300)
    if kind == 1:
        return rng.choice([0.0, -0.0, 5e-324, -5e-324], n)  # signed zeros, subnormals
    if kind == 2:
        return rng.choice([-1.0, 1.0], n) * rng.uniform(1e307, 1.7e308, n)  # sums overflow
    if kind == 3:
        return np.tile([1.0, -1.0], n)[:n]  # means exactly 0 (odd windows: not quite)
    if kind == 4:
        return 1e8 + rng.normal(size=n)  # cancellation in the sums
    if kind == 5:
        return np.round(rng.normal(size=n), 1)  # ties
    return rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-300, 300, n)  # mixed


@needs_c
def test_random_and_hostile_series_give_the_numpy_floats() -> None:
    """Mirrors rolling_fit's numpy contiguous path on 1,500 random cases."""
    rng = np.random.default_rng(20)
    for trial in range(1500):
        n = int(rng.integers(1, 400))
        w = int(rng.integers(1, n + 1)) if trial % 7 else n  # window = length too
        start = int(rng.choice([0, 1, -5, 10**6, 2**40, 2**62, 2**63 - 1 - n]))
        steps = start + np.arange(n, dtype=np.int64)
        same(steps, hostile(rng, n, trial % 7), w)


@needs_c
def test_long_series() -> None:
    rng = np.random.default_rng(21)
    for n, w in ((100_000, 50), (100_000, 3), (50_000, 1000), (20_000, 20_000)):
        steps = np.arange(n, dtype=np.int64) + 17
        same(steps, rng.uniform(0.0, 1.0, n), w)
        same(steps, 0.02 + 1e-3 * np.arange(n) + rng.normal(0, 1e-4, n), w)


@needs_c
def test_steps_that_are_not_contiguous_are_handed_back() -> None:
    rng = np.random.default_rng(22)
    values = rng.normal(size=300)
    for steps in (
        np.arange(300, dtype=np.int64) * 10,
        np.cumsum(rng.integers(1, 3, 300)).astype(np.int64),
        np.r_[np.arange(150), np.arange(151, 301)].astype(np.int64),
    ):
        for w in (3, 20, 300):
            for growth in (True, False):
                assert not kernel_takes(steps, values, w, growth)
            same(steps, values, w, c=False)
    # a run of +1 steps that wraps at the int64 limit: numpy's diff (and the kernel) see
    # +1 steps, but its first and last step are not n - 1 apart, so rolling_fit does not
    # ask the kernel; both paths take the general formula
    wrap = np.arange(10, dtype=np.int64) + np.int64(2**63 - 5)
    assert bool(np.all(np.diff(wrap) == 1)) and int(wrap[-1]) - int(wrap[0]) != 9
    same(wrap, values[:10], 4, c=True)


@needs_c
def test_the_kernel_refuses_wrong_buffers() -> None:
    steps, values = np.arange(10, dtype=np.int64), np.zeros(10)
    with pytest.raises(TypeError):
        _trend.fit(steps.astype(np.int32), values, 3, np.empty(8), np.empty(8), True)
    with pytest.raises(TypeError):
        _trend.fit(steps, values.astype(np.float32), 3, np.empty(8), np.empty(8), True)
    with pytest.raises(ValueError):
        _trend.fit(steps, values, 3, np.empty(7), np.empty(8), True)
    with pytest.raises(ValueError):
        _trend.fit(steps, values, 3, np.empty(8), np.empty(8), False)
    with pytest.raises(ValueError):
        _trend.fit(steps, values, 11, np.empty(0), np.empty(1), False)


RULES = [
    "{window: 20, max_slope: 0.002}",
    "{window: 20, min_slope: -0.002, max_slope: 0.002}",
    "{window: 15, max_growth: 0.02}",
    "{window: 30, min_growth: -0.05, max_slope: 0.01}",
]


@needs_c
@pytest.mark.parametrize("seed", range(3))
def test_verdicts_are_the_numpy_paths_whole_and_in_chunks(tmp_path, monkeypatch, seed):
    """The same verdicts (status, step, value, message, counts) with the kernel and
    without, the run judged whole and fed in chunks of 1, 13 and 400 points, NaN
    points included."""
    rng = np.random.default_rng(30 + seed)
    n = 1500
    values = 1.0 + 0.001 * rng.normal(size=n).cumsum()
    climb = int(rng.integers(900, 1400))
    values[climb:] += 0.003 * np.arange(n - climb)
    if seed:
        values[int(rng.integers(200, n))] = np.nan
    run = run_of(series("train/gap", values, np.arange(n) + 100 * seed))
    for i, args in enumerate(RULES):
        rule = f"  - {{id: t, metric: train/gap, check: {{trend: {args}}}}}\n"
        pol = policy(tmp_path, rule, f"p{i}")
        got = whole_and_chunked(pol, run, (1, 13, 400))
        with monkeypatch.context() as m:
            m.setattr(trend, "USE_C", False)
            want = whole_and_chunked(pol, run, (1, 13, 400))
        assert got == want
