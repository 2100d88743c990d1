"""spike's fast path (a moving median, a MAD bound from counting points inside a band per
block of windows and then per window, exact median/MAD only where the bound cannot clear
a point) against a straightforward reference: the median and MAD of every window with
np.median, point by point, on random data of many shapes."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from gatekeeper.checks.spike import Spike
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series


def reference(check: Spike, values: np.ndarray, n_context: int) -> np.ndarray:
    """Point i against the window values[i - w : i]: its np.median and MAD, every window
    whole (one row each of a sliding view, the same np.median as window by window)."""
    out = np.zeros(values.size - n_context, dtype=bool)
    w = check.window
    first = max(n_context, w)
    if first >= values.size:
        return out
    windows = sliding_window_view(values[first - w : -1], w)  # row j: point first + j's
    med = np.median(windows, axis=1)
    scale = np.maximum(1.4826 * np.median(np.abs(windows - med[:, None]), axis=1),
                       check.min_scale)  # fmt: skip
    x = values[first:]
    dev = {"up": x - med, "down": med - x, "both": np.abs(x - med)}
    out[first - n_context :] = dev[check.direction] > check.factor * scale
    return out


def shaped(rng: np.random.Generator, n: int, shape: int) -> np.ndarray:
    v = rng.normal(size=n)
    if shape == 1:
        v = np.round(v, 1)  # many ties
    elif shape == 2:
        v = np.cumsum(v)  # a random walk: the window median drifts
    elif shape == 3:
        v[rng.random(n) < 0.05] *= 50  # real spikes
    elif shape == 4:
        v = rng.integers(0, 3, n).astype(float)  # few distinct values, MAD often 0
    elif shape == 5:
        v = 1e6 + v * 1e-6  # a large level, tiny noise: the slack must stay safe
    elif shape == 6:
        v = np.linspace(3.0, 1.0, n) + rng.normal(0, 0.01, n)  # a loss curve
    elif shape == 7:
        v = rng.uniform(0.0, 1.0, n)  # flat-topped noise: wide bands
    elif shape == 8:
        v = np.where(rng.random(n) < 0.6, 0.5, rng.normal(size=n))  # MAD 0 in most windows
    elif shape == 9:
        v = np.repeat(rng.normal(size=n // 7 + 1), 7)[:n]  # plateaus: the median sits still
    return v


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_reference_on_random_data(seed):
    rng = np.random.default_rng(seed)
    for trial in range(120):
        n = int(rng.integers(1, 400))
        values = shaped(rng, n, trial % 10)
        check = Spike(
            window=int(rng.integers(3, 30)),
            factor=float(rng.choice([0.5, 1, 2, 3, 5, 8])),
            direction=str(rng.choice(["up", "down", "both"])),
            min_scale=float(rng.choice([0.0, 0.0, 0.1, 1.0])),
        )
        n_context = int(rng.integers(0, n))
        got = check.violations(values, n_context)
        assert np.array_equal(got, reference(check, values, n_context)), (trial, check)


@pytest.mark.parametrize("window", [3, 4, 20, 21, 64, 65])
def test_matches_the_reference_over_many_blocks(window):
    """Long enough for many blocks of windows (16, or window // 2, per band), with spikes
    that inflate a block's band so the per-window band has work to do."""
    rng = np.random.default_rng(window)
    for shape in range(10):
        values = shaped(rng, 2500, shape)
        values[rng.integers(0, values.size, 12)] += rng.choice([-1, 1], 12) * 40.0
        for direction in ("up", "down", "both"):
            check = Spike(window=window, factor=5.0, direction=direction)
            n_context = int(rng.integers(0, 50))
            got = check.violations(values, n_context)
            assert np.array_equal(got, reference(check, values, n_context)), (shape, direction)


def test_the_bound_clears_ordinary_noise():
    """The point of the bound: on noise (and on noise with spikes) the exact median/MAD is
    computed for almost no point."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=20_000)
    check = Spike(window=20, factor=5.0)
    assert check._may_violate(values).sum() < 100  # 0.5%
    values[rng.integers(0, values.size, 100)] += 50.0
    maybe = check._may_violate(values)
    assert maybe.sum() < 400  # the spikes themselves, about
    assert np.array_equal(check.violations(values, 0), reference(check, values, 0))


def test_huge_values_take_the_exact_path():
    values = np.array([1e305, -1e305] * 20 + [1e306])
    check = Spike(window=5, factor=1, direction="both")
    assert np.array_equal(check.violations(values, 0), reference(check, values, 0))


RULE = "  - {{id: s, metric: train/loss, check: {{spike: {{window: {w}, factor: {k}}}}}}}\n"


@pytest.mark.parametrize("seed", range(4))
def test_chunked_feeding_with_nan_gives_the_whole_run_verdict(tmp_path, seed):
    rng = np.random.default_rng(seed)
    values = shaped(rng, 1000, seed + 2)
    nan = int(rng.integers(100, 1000))
    if seed % 2:
        values[nan] = np.nan  # never a pass: an ERROR at its step, or a spike before it
    pol = policy(tmp_path, RULE.format(w=int(rng.integers(3, 40)), k=3))
    run = run_of(series("train/loss", values))
    whole = judge(pol, run)
    for chunk in (1, 7, 333):
        part = judge_in_chunks(pol, run, chunk)
        assert (part.status, part.step, part.violations, part.judged) == (
            whole.status,
            whole.step,
            whole.violations,
            whole.judged,
        )
    if seed % 2:  # the first violation in step order (docs/policy.md, Statuses)
        if whole.status is Status.FAIL:
            assert whole.step < nan and f"non-finite value NaN at train/step {nan}" in (
                whole.message
            )
        else:
            assert (whole.status, whole.step) == (Status.ERROR, nan)


def test_non_finite_values_get_the_exact_paths_answer(monkeypatch):
    """The engine never hands a window with NaN/Inf to the check (that is an ERROR at its
    step), but a direct caller may: the bound stands aside and the exact path decides."""
    rng = np.random.default_rng(7)
    values = rng.normal(size=300)
    values[rng.integers(0, 300, 6)] = [np.nan, np.inf, -np.inf, np.nan, 1e308, -1e308]
    check = Spike(window=9, factor=2, direction="both")
    fast = check.violations(values, 0)
    monkeypatch.setattr(Spike, "_may_violate", lambda self, part: None)
    assert np.array_equal(fast, check.violations(values, 0))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the references
@pytest.mark.parametrize("factor", [1e-300, 1e-250, 3.0, 1e250, 1e300])
@pytest.mark.parametrize("level", [1e-300, 1e-200, 1.0, 1e200])
def test_extreme_factors_and_levels_match_the_reference(factor, level):
    """Factors beyond ~1e+-298 make t's products leave the normal floats: each cleared
    point then gets the exact path's own comparison; tiny values lift t to >= 2^-980."""
    rng = np.random.default_rng(int(np.log10(factor) * 7 + np.log10(level)) + 5000)
    for shape in range(10):
        values = shaped(rng, 600, shape) * level
        if not np.all(np.isfinite(values)):
            continue
        for direction in ("up", "down", "both"):
            for min_scale in (0.0, level):
                check = Spike(window=9, factor=factor, direction=direction, min_scale=min_scale)
                got = check.violations(values, 0)
                assert np.array_equal(got, reference(check, values, 0)), (shape, direction)


def test_chunks_of_windows_give_the_whole_answer():
    """Bounded CHUNK windows at a time: spikes and a stretch of huge values (no bound in
    that chunk, the exact path there) across chunk edges, against the reference."""
    from gatekeeper.checks import spike

    rng = np.random.default_rng(11)
    values = rng.normal(size=3 * spike.CHUNK + 123)
    for edge in (spike.CHUNK, 2 * spike.CHUNK):
        values[edge - 3 : edge + 4 : 2] += 30.0  # spikes either side of an edge
    values[spike.CHUNK + 500] = 1e305  # a huge value: that chunk takes the exact path
    for window in (5, 20, 33):
        check = Spike(window=window, factor=5.0, direction="both")
        got = check.violations(values, 7)
        assert np.array_equal(got, reference(check, values, 7)), window
        maybe = check._may_violate(values)
        assert maybe[spike.CHUNK + 2000 : 2 * spike.CHUNK - 1000].all()  # no bound there
        assert maybe[:100].sum() + maybe[-100:].sum() < 20  # elsewhere the bound holds


@pytest.mark.parametrize("window", [3, 4, 20, 21])
def test_signed_zeros_and_subnormals_match_the_reference(window):
    """Medians and MADs of 0.0, -0.0 and subnormals (the band's lift to 2^-980 and the
    slack of a largest |value| of 0 are at their edge here), whole and with context."""
    rng = np.random.default_rng(window + 600)
    for direction in ("up", "down", "both"):
        for factor, min_scale in ((1e-300, 0.0), (1.0, 0.0), (1.0, 5e-324)):
            check = Spike(window=window, factor=factor, direction=direction, min_scale=min_scale)
            for values in (
                rng.choice([0.0, -0.0, 5e-324, -5e-324, 1e-310, 1.0], 500),
                rng.choice([0.0, -0.0], 200),
            ):
                for n_context in (0, 7):
                    got = check.violations(values, n_context)
                    assert np.array_equal(got, reference(check, values, n_context))
