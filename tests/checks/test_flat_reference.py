"""flat's fast paths against plain references: the std of every window summed from the
window's own points (`_window_std`, each window the same float whatever the span it is
computed in), and max - min of every window by sorting through a sliding view. The bound
that skips a block (a sub-block variance, less every rounding error) must never skip a
window the reference finds flat, and min_range's moving max/min are exact: the same
masks, so the same verdicts, whole and poll by poll with NaN points.

Until the thirteenth session a window's std came from running sums over the block of
windows it fell in, centred on that block's mean: a poll's blocks began at its first
point, `check`'s at the run's, so a std at the floor (a metric alternating +-d about a
level, `min_std: d`) was flat in one and not the other (149 of 400 such runs judged
differently whole and in polls of 1, 7 and 100 points)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from gatekeeper.checks.flat import BLOCK, Flat, _window_std
from tests.checks.util import policy, run_of, series, whole_and_chunked


def reference(check: Flat, values: np.ndarray, n_context: int, first: int = 0) -> np.ndarray:
    out = np.zeros(values.size - n_context, dtype=bool)
    w = check.window
    end = max(n_context, w - 1)
    if end >= values.size:
        return out
    part = values[end - w + 1 :]
    if check.min_std is not None:  # every window, in one span, no bound
        spread = _window_std(part, w, first + end - w + 1)
    else:
        windows = sliding_window_view(part, w)
        spread = windows.max(axis=1) - windows.min(axis=1)
    out[end - n_context :] = spread < check._floor()
    return out


def shaped(rng: np.random.Generator, n: int, shape: int, floor: float) -> np.ndarray:
    if shape == 0:
        return rng.normal(size=n)
    if shape == 1:  # healthy, then collapsed to one value, then back
        v = 0.5 + rng.normal(0, 0.05, n)
        v[n // 3 : n // 2] = 0.98
        return v
    if shape == 2:  # a std of exactly the floor: +-floor about a level
        return 3.0 + floor * np.where(np.arange(n) % 2, 1.0, -1.0)
    if shape == 3:  # a large level, noise near the floor: the rounding bounds matter
        return 1e6 + rng.normal(0, floor, n)
    if shape == 4:  # a loss curve whose noise fades to the floor
        return np.linspace(3.0, 1.0, n) + rng.normal(0, 1, n) * np.geomspace(1, floor, n)
    if shape == 5:
        return np.round(rng.normal(size=n), 1)  # ties
    return np.cumsum(rng.normal(0, floor, n)) + 1e3  # a slow random walk


@pytest.mark.parametrize("seed", range(4))
def test_masks_are_the_references(seed):
    rng = np.random.default_rng(seed)
    for trial in range(60):
        floor = float(rng.choice([1e-6, 1e-3, 0.05, 1.0]))
        n = int(rng.integers(2, 10_000)) if trial % 4 else int(rng.integers(2 * BLOCK, 3 * BLOCK))
        values = shaped(rng, n, trial % 7, floor)
        w = int(rng.choice([2, 3, 4, 5, 20, 21, 50, 200, 1000]))
        for fields in ({"min_std": floor}, {"min_range": floor}):
            check = Flat(window=w, **fields)
            n_context = int(rng.integers(0, min(n, 2 * w)))
            first = int(rng.integers(0, 10**9))
            got = check.violations(values, n_context, first=first)
            want = reference(check, values, n_context, first)
            assert np.array_equal(got, want), (trial, w, fields, n)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf - inf, as before
def test_non_finite_values_get_the_references_answer():
    """The engine never hands a window with NaN/Inf to the check (that is an ERROR at its
    step), but a direct caller may: such a block is not skipped."""
    rng = np.random.default_rng(1)
    values = rng.normal(size=9000)
    values[[5, 4500, 8000]] = [np.nan, np.inf, -np.inf]
    values[6000:6100] = 2.0
    for w, fields in itertools.product((3, 20, 64), ({"min_std": 1e-3}, {"min_range": 1e-3})):
        check = Flat(window=w, **fields)
        assert np.array_equal(check.violations(values, 0), reference(check, values, 0))


def test_the_bound_skips_healthy_blocks_only(monkeypatch):
    """The point of the bound: a block of ordinary noise costs no sums; a block with a
    collapse in it is computed."""
    from gatekeeper.checks import flat

    computed = []

    def counted(span: np.ndarray, w: int, first: int) -> np.ndarray:
        computed.append(span)
        return _window_std(span, w, first)

    monkeypatch.setattr(flat, "_window_std", counted)
    values = np.random.default_rng(2).normal(0.5, 0.05, 5 * BLOCK)
    check = Flat(window=50, min_std=1e-3)
    assert not check.violations(values, 0).any() and computed == []
    values[3 * BLOCK + 100 : 3 * BLOCK + 300] = 0.98
    mask = check.violations(values, 0)
    assert len(computed) == 1 and mask.sum() == 200 - 50 + 1


def _reference_violations(self, values, n_context, first=0):
    return reference(self, values, n_context, first)


RULES = ["{window: 20, min_std: 0.005}", "{window: 50, min_range: 0.02}"]


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_are_the_references_whole_and_in_chunks(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = 3000
    values = 0.5 + rng.normal(0, 0.05, n)
    if seed % 2 == 0:
        values[2000:2100] = 0.98  # collapses
    if seed >= 2:
        values[int(rng.integers(100, n))] = np.nan  # an ERROR at its step, never a pass
    run = run_of(series("m", values))
    for i, args in enumerate(RULES):
        pol = policy(tmp_path, f"  - {{id: f, metric: m, check: {{flat: {args}}}}}\n", f"p{i}")
        got = whole_and_chunked(pol, run, (1, 37, 1000))
        with monkeypatch.context() as m:
            m.setattr(Flat, "violations", _reference_violations)
            want = whole_and_chunked(pol, run, (1, 37, 1000))
        assert got == want


def longdouble_std(values: np.ndarray, w: int) -> np.ndarray:
    """Each window's population std, centred on its own mean, in np.longdouble."""
    x = sliding_window_view(values.astype(np.longdouble), w)
    d = x - x.mean(axis=1, keepdims=True)
    return np.sqrt((d * d).mean(axis=1)).astype(np.float64)


@pytest.mark.parametrize("seed", range(3))
def test_each_windows_std_is_its_own_whatever_the_span(seed):
    """A window's std is the same float computed in any span that holds it (given the
    span's first point number), and within a few ulps of the window's range of the
    extended-precision std."""
    rng = np.random.default_rng(seed)
    for trial in range(200):
        w = int(rng.integers(2, 60))
        n = int(rng.integers(w, 800))
        first = int(rng.integers(0, 3)) if trial % 2 else int(rng.integers(0, 2**40))
        level = float(rng.choice([0.0, 3.0, 1e6]))
        values = level + rng.normal(0, float(rng.choice([1e-3, 1.0])), n)
        if trial % 3 == 0:
            values = np.round(values, 1)  # ties, whole windows of one value
        whole = _window_std(values, w, first)
        spread = np.ptp(values)
        assert np.all(np.abs(whole - longdouble_std(values, w)) <= 8e-15 * spread), trial
        a = int(rng.integers(0, n - w + 1))
        b = int(rng.integers(a + w, n + 1))
        part = _window_std(values[a:b], w, first + a)
        assert np.array_equal(part.view(np.int64), whole[a : b - w + 1].view(np.int64)), trial


@pytest.mark.parametrize("seed", range(2))
def test_a_std_at_the_floor_is_judged_alike_whole_and_polled(tmp_path, seed):
    """Runs whose windows' std sits at `min_std` (two values, +-d about a level): the
    verdict, message included, is the same judged whole and fed 1, 7 and 100 points at a
    time. Before: 149 of 400 such runs differed, some PASS whole and FAIL live."""
    rng = np.random.default_rng(seed)
    for trial in range(30):
        w = int(rng.integers(2, 40))
        n = int(rng.integers(w + 5, 1500))
        if trial % 2:
            values = rng.integers(0, 2, n).astype(np.float64)
            floor = 0.5
        else:
            level = float(rng.choice([0.001, 0.1, 1.7, 123.456, 1e6]))
            d = float(rng.choice([0.25, 0.5, 1e-3]))
            values = level + d * np.where(np.arange(n) % 2, 1.0, -1.0)
            floor = d
        rule = f"  - {{id: f, metric: m, check: {{flat: {{window: {w}, min_std: {floor!r}}}}}}}\n"
        got = whole_and_chunked(policy(tmp_path, rule, "p"), run_of(series("m", values)),
                                (1, 7, 100))
        assert len(set(got)) == 1, (trial, w, n, got)
