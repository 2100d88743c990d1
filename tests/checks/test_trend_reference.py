"""trend's window fit against the formula it replaced, kept here as the reference: running
sums of x, y, x^2 and xy for every window, then slope and growth elementwise. The fast
path (closed-form step sums on contiguous steps, growth of the last window only when no
growth bound asks for more) must give the very same floats, and so the same verdicts,
fed whole or poll by poll with NaN points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gatekeeper.checks import trend
from gatekeeper.checks.trend import rolling_fit
from tests.checks.util import policy, run_of, series, whole_and_chunked


def reference_fit(steps: np.ndarray, values: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray]:
    x = (steps - steps[0]).astype(np.float64)
    y = values

    def sums(a: np.ndarray) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(a)])
        return c[w:] - c[:-w]

    sx, sy, sxx, sxy = sums(x), sums(y), sums(x * x), sums(x * y)
    denom = w * sxx - sx * sx
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(denom > 0, (w * sxy - sx * sy) / denom, 0.0)
        mean = sy / w
        span = x[w - 1 :] - x[: x.size - w + 1]
        growth = np.where(mean != 0, slope * span / np.abs(mean), 0.0)
    return slope, growth


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
        return 1e8 + rng.normal(size=n)  # cancellation in the sums
    return np.round(rng.normal(size=n), 2) * rng.choice([-1.0, 1.0], n)


def steps_of(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    start = int(rng.choice([0, 1, 7, 10**6, 2**40]))
    if kind == 0:
        return start + np.arange(n, dtype=np.int64)  # contiguous: the closed form
    if kind == 1:
        return start + 10 * np.arange(n, dtype=np.int64)  # logged every 10 steps
    return start + np.cumsum(rng.integers(1, 4, n)).astype(np.int64)  # irregular


@pytest.mark.parametrize("seed", range(4))
def test_the_fit_gives_the_reference_floats(seed):
    rng = np.random.default_rng(seed)
    for trial in range(150):
        n = int(rng.integers(3, 3000))
        w = int(rng.integers(3, min(n, 300) + 1))
        steps, values = steps_of(rng, n, trial % 3), values_of(rng, n, trial % 5)
        want_slope, want_growth = reference_fit(steps, values, w)
        slope, growth = rolling_fit(steps, values, w)
        assert same_bits(slope, want_slope) and same_bits(growth, want_growth), (trial, n, w)
        slope, last = rolling_fit(steps, values, w, growth=False)
        assert same_bits(slope, want_slope) and same_bits(last, want_growth[-1:]), (trial, n, w)


@pytest.mark.parametrize(("n", "w"), [(310_000, 5), (100_000, 1000)])
def test_beyond_exact_integer_sums_the_general_formula_is_used(n, w):
    """Running sums of x^2 past 2^53, or w * Sxx past it: the step sums are no longer
    exact integers, so the closed form would differ; the general formula is taken."""
    rng = np.random.default_rng(n)
    steps, values = np.arange(n, dtype=np.int64), rng.normal(size=n)
    want_slope, want_growth = reference_fit(steps, values, w)
    slope, growth = rolling_fit(steps, values, w)
    assert same_bits(slope, want_slope) and same_bits(growth, want_growth)


def test_hostile_series_and_steps_near_the_int64_end_give_the_reference_floats():
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
        want_slope, want_growth = reference_fit(steps, values, w)
        slope, growth = rolling_fit(steps, values, w)
        assert same_bits(slope, want_slope) and same_bits(growth, want_growth), (trial, n, w)


def _old_fit(steps, values, w, *, growth=True):
    return reference_fit(steps, values, w)


RULES = [
    "{window: 20, max_slope: 0.002}",
    "{window: 20, min_slope: -0.002, max_slope: 0.002}",
    "{window: 15, max_growth: 0.02}",
    "{window: 30, min_growth: -0.05, max_slope: 0.01}",
]


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_are_those_of_the_reference_whole_and_in_chunks(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = 1500
    values = 1.0 + 0.001 * rng.normal(size=n).cumsum()
    climb = int(rng.integers(900, 1400))
    values[climb:] += 0.003 * np.arange(n - climb)  # the windows after it fail
    steps = steps_of(rng, n, seed % 3)
    runs = [run_of(series("train/gap", values, steps))]
    if seed % 2:
        at = int(rng.integers(200, n))
        values[at] = np.nan  # an ERROR at its step, never a pass; and the points before it
        whole = run_of(series("train/gap", values, steps))
        runs = [whole, run_of(series("train/gap", values[:at], steps[:at]))]
    for (i, args), run in itertools.product(enumerate(RULES), runs):
        rule = f"  - {{id: t, metric: train/gap, check: {{trend: {args}}}}}\n"
        pol = policy(tmp_path, rule, f"p{i}")
        got = whole_and_chunked(pol, run, (1, 13, 400))
        with monkeypatch.context() as m:
            m.setattr(trend, "rolling_fit", _old_fit)
            want = whole_and_chunked(pol, run, (1, 13, 400))
        assert got == want
