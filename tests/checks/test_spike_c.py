"""The spike check's C kernel (`gatekeeper/checks/_spike.c`) against its numpy path.

Every test judges the same values twice, with `spike.USE_C` on and off, and requires the
same boolean array, element for element: random noise, spikes, constant windows (MAD 0,
with and without min_scale), ties, odd and even windows, all three directions, factors
from 1e-300 to 1e300, values from 1e-300 to 1e200 in magnitude, signed zeros, and chunked
feeding with n_context as live polls make it. Non-finite and huge values must be handed
back to the numpy path (the kernel writes nothing and says so). tests/test_extensions_built.py
requires the extension to be built, and used, wherever a C compiler is present, so CI
cannot pass on the slow path unnoticed.
"""

from __future__ import annotations

import numpy as np
import pytest

from gatekeeper.checks import spike as spike_mod
from gatekeeper.checks.spike import DIRECTIONS, Spike

# The comparisons skip without the extension; tests/test_extensions_built.py fails
# when it is missing where a compiler is.
_spike = spike_mod._spike
needs_c = pytest.mark.skipif(_spike is None, reason="gatekeeper.checks._spike not built")

WINDOWS = (3, 4, 5, 20, 21, 64)
DIRS = ("up", "down", "both")
FACTORS = (1e-300, 1e-200, 1e-12, 0.5, 1.0, 3.0, 8.0, 1e12, 1e200, 1e300)


def numpy_path(check: Spike, values: np.ndarray, n_context: int) -> np.ndarray:
    spike_mod.USE_C = False
    try:
        with np.errstate(over="ignore"):  # factor x scale beyond 1e308: inf, as in C
            return check.violations(values, n_context)
    finally:
        spike_mod.USE_C = True


def c_handles(check: Spike, values: np.ndarray, n_context: int) -> bool:
    """Whether the kernel takes this call (False: it hands it back, writing nothing).
    Both copies of its loop run (the AVX2 one where the CPU has it, and the baseline one)
    and must agree with each other and with what `violations` returns."""
    w = check.window
    first = max(n_context, w)
    if first >= values.size:
        return True
    part = np.ascontiguousarray(values[first - w :])
    outs, took = [], []
    for simd in (True, False):
        out = np.zeros(values.size - first, dtype=bool)
        took.append(_spike.violations(part, out, w, check.factor, check.min_scale,
                                      DIRECTIONS[check.direction], simd))
        outs.append(out)
    assert took[0] is took[1]
    assert np.array_equal(outs[0], outs[1]), np.flatnonzero(outs[0] != outs[1])[:10]
    if not took[0]:
        assert not outs[0].any()
    else:
        got = check.violations(values, n_context)
        assert not got[: first - n_context].any()
        assert np.array_equal(got[first - n_context :], outs[0])
    return bool(took[0])


def same(check: Spike, values: np.ndarray, n_context: int = 0, *, c: bool = True) -> np.ndarray:
    """The verdicts, after checking the C path gives the numpy path's, and whether the
    kernel took the call (c) or handed it back."""
    assert c_handles(check, values, n_context) is c, (check, c)
    got = check.violations(values, n_context)
    want = numpy_path(check, values, n_context)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want), (check, np.flatnonzero(got != want)[:10])
    return got


def checks(windows=WINDOWS, factors=(3.0, 8.0), min_scales=(0.0,)):
    for w in windows:
        for d in DIRS:
            for f in factors:
                for m in min_scales:
                    yield Spike(window=w, factor=f, direction=d, min_scale=m)


@needs_c
def test_random_noise_and_spikes() -> None:
    rng = np.random.default_rng(0)
    for check in checks(factors=(0.5, 1.0, 3.0, 8.0)):
        values = rng.normal(0.0, 1.0, 1500) + np.linspace(0, 3, 1500)
        at = rng.integers(0, values.size, 15)
        values[at] += rng.choice([-1.0, 1.0], at.size) * rng.uniform(3, 40, at.size)
        got = same(check, values)
        if check.factor <= 1.0:
            assert got.any()


@needs_c
def test_uniform_noise_as_the_benchmark_draws_it() -> None:
    rng = np.random.default_rng(1)
    values = rng.uniform(0.0, 1.0, 20_000)
    for check in checks(windows=(20,), factors=(1.0, 2.0, 8.0)):
        same(check, values)


@needs_c
def test_constant_windows_zero_mad_with_and_without_min_scale() -> None:
    rng = np.random.default_rng(2)
    for check in checks(factors=(1e-300, 1.0, 5.0), min_scales=(0.0, 1e-300, 0.01, 1.0)):
        values = np.full(600, 1.0)
        at = rng.integers(0, values.size, 30)
        values[at] += rng.choice([-1.0, 1.0], at.size) * rng.choice([1e-12, 1e-3, 0.5], at.size)
        got = same(check, values)
        if check.min_scale == 0.0:
            assert got.any()  # any change over a constant window is infinitely many MADs
        same(check, np.full(300, -2.5))


@needs_c
def test_ties_and_few_levels() -> None:
    rng = np.random.default_rng(3)
    for levels in (2, 3, 5):
        for check in checks(factors=(1e-12, 0.5, 1.0, 2.0), min_scales=(0.0, 0.5)):
            values = rng.integers(0, levels, 800).astype(np.float64)
            same(check, values)


@needs_c
def test_factors_across_the_float_range() -> None:
    rng = np.random.default_rng(4)
    for check in checks(windows=(3, 4, 20, 21), factors=FACTORS, min_scales=(0.0, 1e-300, 2.0)):
        values = rng.normal(0.0, 1.0, 400)
        values[::37] *= 1e6
        same(check, values)


@needs_c
def test_values_across_the_float_range() -> None:
    rng = np.random.default_rng(5)
    for scale in (1e-300, 1e-200, 1e-100, 1e-10, 1.0, 1e100, 1e200):
        for check in checks(windows=(3, 4, 5, 21, 64), factors=(1e-300, 1.0, 8.0, 1e300),
                            min_scales=(0.0, 1e-300)):
            values = rng.normal(0.0, 1.0, 300) * scale
            same(check, values)
    # magnitudes mixed from 1e-300 to 1e200 in one series, either sign
    for check in checks(factors=(1e-300, 1e-100, 1.0, 1e100, 1e300), min_scales=(0.0, 1e-200)):
        values = rng.choice([-1.0, 1.0], 500) * 10.0 ** rng.uniform(-300, 200, 500)
        same(check, values)


@needs_c
def test_signed_zeros_and_subnormals() -> None:
    rng = np.random.default_rng(6)
    for check in checks(factors=(1e-300, 1.0), min_scales=(0.0, 5e-324)):
        values = rng.choice([0.0, -0.0, 5e-324, -5e-324, 1e-310, 1.0], 500)
        same(check, values)
        same(check, rng.choice([0.0, -0.0], 200))


@needs_c
def test_non_finite_and_huge_values_go_to_the_numpy_path() -> None:
    rng = np.random.default_rng(7)
    for bad in (np.nan, np.inf, -np.inf, 1.5e300, -1e308):
        for check in checks(windows=(3, 4, 20), factors=(1.0, 8.0)):
            for where in (0, check.window - 1, check.window, 150, 299):
                values = rng.normal(0.0, 1.0, 300)
                values[where] = bad
                same(check, values, c=False)
                # the kernel sees values[max(n_context, w) - w:]: outside it, no hand-back
                for n_context in (0, where, where + check.window, where + check.window + 1):
                    n_context = min(n_context, 299)
                    inside = where >= max(n_context, check.window) - check.window
                    same(check, values, n_context, c=not inside)


@needs_c
def test_non_finite_before_the_windows_judged_does_not_matter() -> None:
    rng = np.random.default_rng(8)
    check = Spike(window=5, factor=2.0, direction="both")
    values = rng.normal(0.0, 1.0, 100)
    values[3] = np.nan
    same(check, values, n_context=9)  # first point 9, its window starts at 4


@needs_c
def test_chunked_feeding_with_context_matches_one_call() -> None:
    """Live polls call violations(values, n_context) on the new points with up to
    `window` earlier points in front: the verdicts must join to the one-call array."""
    rng = np.random.default_rng(9)
    for check in checks(factors=(0.5, 3.0), min_scales=(0.0, 0.1)):
        w = check.window
        values = rng.normal(0.0, 1.0, 900)
        values[rng.integers(0, 900, 10)] += 25.0
        whole = same(check, values)
        cuts = np.unique(np.r_[0, np.sort(rng.integers(1, 900, 12)), 900])
        parts = []
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            lo = max(0, int(a) - w)
            parts.append(same(check, values[lo:b], n_context=int(a) - lo))
        assert np.array_equal(np.concatenate(parts), whole)
        # a context longer than the window, and one shorter (the run's first points)
        same(check, values[100:400], n_context=w + 7)
        same(check, values[:400], n_context=w // 2)


@needs_c
def test_random_cases_against_the_numpy_path() -> None:
    """Mirrors Spike's numpy path (the reference) on 2,500 random short cases: any window
    3-69 (longer than the series too), direction, factor 1e-300..1e300 and min_scale,
    values of one scale or mixed, few levels (ties), constant runs, signed zeros, a NaN
    or +-inf or huge value now and then (handed back), any n_context. Each case also
    compares the kernel's AVX2 and baseline loops (c_handles)."""
    rng = np.random.default_rng(12)
    for _ in range(2500):
        w = int(rng.integers(3, 70))
        n = int(rng.integers(0, 260))
        kind = int(rng.integers(0, 5))
        if kind == 0:
            values = rng.normal(0.0, 1.0, n) * 10.0 ** rng.uniform(-300, 290)
        elif kind == 1:
            values = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-300, 200, n)
        elif kind == 2:
            values = rng.integers(-2, 3, n).astype(np.float64)  # ties
        elif kind == 3:
            values = np.repeat(rng.normal(0.0, 1.0, n // 17 + 1), 17)[:n]  # constant runs
        else:
            values = rng.choice([0.0, -0.0, 1.0, -1.0, 5e-324], n)
        spikes = rng.integers(0, max(n, 1), int(rng.integers(0, 4))) if n else []
        for at in spikes:
            values[at] *= rng.choice([10.0, -30.0, 1e6])
        bad = n and rng.random() < 0.1
        if bad:
            values[int(rng.integers(0, n))] = rng.choice([np.nan, np.inf, -np.inf, 1e301])
        check = Spike(
            window=w,
            factor=float(10.0 ** rng.uniform(-300, 300) if rng.random() < 0.2
                         else rng.uniform(0.1, 12.0)),
            direction=DIRS[int(rng.integers(0, 3))],
            min_scale=float(rng.choice([0.0, 0.0, 1e-300, 0.05, 1.0])),
        )
        n_context = int(rng.integers(0, n + 1)) if n else 0
        w_first = max(n_context, w)
        part = values[max(w_first - w, 0):]
        handled = w_first >= n or bool(np.all(np.abs(part) <= 1e300))
        same(check, values, n_context, c=handled)


@needs_c
def test_short_and_exact_lengths() -> None:
    rng = np.random.default_rng(10)
    for check in checks(windows=(3, 4, 20), factors=(1.0,)):
        w = check.window
        for n in (0, 1, w - 1, w, w + 1, w + 2):
            for n_context in sorted({0, min(n, 1), n}):
                same(check, rng.normal(0.0, 1.0, n), n_context)


@needs_c
def test_strided_and_other_dtypes() -> None:
    rng = np.random.default_rng(11)
    check = Spike(window=5, factor=1.0, direction="both")
    values = rng.normal(0.0, 1.0, 400)
    got = check.violations(values[::2], 0)  # a strided view: copied contiguous first
    assert np.array_equal(got, numpy_path(check, values[::2], 0))
    small = values.astype(np.float32)  # not float64: the numpy path, as before
    assert np.array_equal(check.violations(small, 0), numpy_path(check, small, 0))


@needs_c
def test_the_kernel_refuses_wrong_buffers() -> None:
    part = np.zeros(10)
    with pytest.raises(TypeError):
        _spike.violations(part.astype(np.float32), np.zeros(7, bool), 3, 1.0, 0.0, 0)
    with pytest.raises(TypeError):
        _spike.violations(part, np.zeros(7, np.int8), 3, 1.0, 0.0, 0)
    with pytest.raises(ValueError):
        _spike.violations(part, np.zeros(6, bool), 3, 1.0, 0.0, 0)
    with pytest.raises(ValueError):
        _spike.violations(part, np.zeros(7, bool), 3, 1.0, 0.0, 3)
    with pytest.raises(ValueError):  # numpy: "ndarray is not C-contiguous"
        _spike.violations(part, np.zeros(14, bool)[::2], 3, 1.0, 0.0, 0)
