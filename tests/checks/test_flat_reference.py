"""flat's fast paths against the code they replaced, kept here as the reference: the
blockwise running-sum std of every window, and max - min of every window by sorting
through a sliding view. The bound that skips a block (a sub-block variance, less every
rounding error) must never skip a window the reference finds flat, and min_range's
moving max/min are exact: the same masks, so the same verdicts, whole and poll by poll
with NaN points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from gatekeeper.checks.flat import BLOCK, Flat, _rolling_std
from tests.checks.util import policy, run_of, series, whole_and_chunked


def reference(check: Flat, values: np.ndarray, n_context: int) -> np.ndarray:
    out = np.zeros(values.size - n_context, dtype=bool)
    w = check.window
    first = max(n_context, w - 1)
    if first >= values.size:
        return out
    part = values[first - w + 1 :]
    if check.min_std is not None:
        spread = np.concatenate(
            [
                _rolling_std(part[lo : lo + BLOCK + w - 1], w)
                for lo in range(0, part.size - w + 1, BLOCK)
            ]
        )
    else:
        windows = sliding_window_view(part, w)
        spread = windows.max(axis=1) - windows.min(axis=1)
    out[first - n_context :] = spread < check._floor()
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
            got = check.violations(values, n_context)
            want = reference(check, values, n_context)
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
    """The point of the bound: a block of ordinary noise costs no running sums; a block
    with a collapse in it is computed."""
    from gatekeeper.checks import flat

    computed = []

    def counted(span: np.ndarray, w: int) -> np.ndarray:
        computed.append(span)
        return _rolling_std(span, w)

    monkeypatch.setattr(flat, "_rolling_std", counted)
    values = np.random.default_rng(2).normal(0.5, 0.05, 5 * BLOCK)
    check = Flat(window=50, min_std=1e-3)
    assert not check.violations(values, 0).any() and computed == []
    values[3 * BLOCK + 100 : 3 * BLOCK + 300] = 0.98
    mask = check.violations(values, 0)
    assert len(computed) == 1 and mask.sum() == 200 - 50 + 1


def _reference_violations(self, values, n_context):
    return reference(self, values, n_context)


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
