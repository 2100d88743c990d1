"""history's corridor against the code it replaced, kept here as the reference: bands of
full temporary arrays and the judged points gathered through an all-True mask. The
in-place bands and the no-gather common path must give the very same floats, and so
the same verdicts and plot overlays, fed whole or poll by poll with NaN points."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from gatekeeper.checks.history import History, HistoryState, Judgement
from gatekeeper.engine import Evaluation
from gatekeeper.history import Baselines, RuleBaseline
from gatekeeper.model import Series
from gatekeeper.verdict import Status
from tests.checks.util import policy, run_of, series


def reference_bands(check: History, ref: np.ndarray, std: np.ndarray):
    k = (check.k_std or 0.0) * std
    size = np.abs(ref)
    up = np.maximum(np.maximum((check.rel_up or 0.0) * size, check.abs_floor_up or 0.0), k)
    down = np.maximum(np.maximum((check.rel_down or 0.0) * size, check.abs_floor_down or 0.0), k)
    return down, up


def reference_judge(check: History, state: HistoryState, baseline) -> Judgement:
    steps, values = state.points()
    coords = np.arange(-steps.size, 0) if baseline and baseline.positional else steps
    stats = baseline.stats(check.last_n) if baseline is not None else None
    if stats is None or not stats.steps.size:
        empty = np.empty(0)
        return Judgement(steps[:0], empty, empty, empty, empty, empty, int(steps.size))
    if (
        coords.size == stats.steps.size
        and np.array_equal(coords, stats.steps)
        and bool(np.all(stats.count >= check.min_history))
    ):
        pos: np.ndarray | slice = slice(None)
        active = np.ones(steps.size, dtype=bool)
    else:
        where = np.clip(np.searchsorted(stats.steps, coords), 0, stats.steps.size - 1)
        found = stats.steps[where] == coords
        where = where[found]
        active = found.copy()
        active[found] = stats.count[where] >= check.min_history
        pos = where[stats.count[where] >= check.min_history]
    ref, std = stats.ref[pos], stats.std[pos]
    down, up = reference_bands(check, ref, std)
    return Judgement(
        steps[active],
        values[active],
        ref,
        ref - down,
        ref + up,
        stats.count[pos],
        int(steps.size - active.sum()),
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


CHECKS = [
    {"rel_up": 0.05, "rel_down": 0.05},
    {"rel_up": 0.05, "abs_floor_up": 0.01, "rel_down": 0.1},
    {"k_std": 2, "last_n": 3},
    {"rel_up": 0.0, "abs_floor_up": 0.02, "abs_floor_down": 0.02, "k_std": 1, "min_history": 3},
]


def baseline_for(rng: np.random.Generator, steps: np.ndarray, values: np.ndarray, kind: int):
    """Past runs around the values: all steps (the usual), some steps missing, or fewer
    runs at some steps (min_history leaves them inactive)."""
    past = {}
    for s, v in zip(steps.tolist(), values.tolist(), strict=True):
        if kind == 1 and rng.random() < 0.2:
            continue
        depth = 5 if kind != 2 else int(rng.integers(1, 6))
        past[s] = (v * rng.uniform(0.995, 1.005, depth) + rng.normal(0, 1e-3, depth)).tolist()
    return RuleBaseline(past)


@pytest.mark.parametrize("seed", range(3))
def test_the_corridor_is_the_references_floats(seed):
    rng = np.random.default_rng(seed)
    for trial, (fields, kind) in enumerate(itertools.product(CHECKS, range(3))):
        check = History.parse(fields)
        n = int(rng.integers(1, 2000))
        steps = np.sort(rng.choice(5 * n, n, replace=False)).astype(np.int64)
        values = rng.normal(1.0, 0.2, n) * rng.choice([1.0, -1.0, 0.0], n, p=[0.8, 0.1, 0.1])
        base = baseline_for(rng, steps, values, kind)
        state = check.feed(check.start(), steps, values)
        want = reference_judge(check, state, base)
        got = check.judge(state, base)
        for name in ("steps", "values", "ref", "lo", "hi", "n"):
            assert same_bits(getattr(got, name), getattr(want, name)), (trial, name)
        assert got.inactive == want.inactive
        assert same_bits(got.bad(), (want.values < want.lo) | (want.values > want.hi))


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_and_overlays_are_the_references(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = 800
    steps = np.arange(n, dtype=np.int64) * (1 + seed % 2)
    base_values = 1.0 + rng.normal(0, 0.02, n)
    values = base_values.copy()
    values[rng.integers(0, n, 3)] *= 1.5  # a few drift
    runs = [run_of(series("m", values, steps)), run_of(series("m", base_values, steps))]
    if seed >= 2:
        values = values.copy()
        at = int(rng.integers(100, n))
        values[at] = np.nan  # an ERROR at its step, never a pass; and the points before it
        whole = run_of(series("m", values, steps))
        runs = [whole, run_of(series("m", values[:at], steps[:at]))]
    statuses = set()
    for (i, fields), run in itertools.product(enumerate(CHECKS), runs):
        rule = f"  - {{id: h, metric: m, check: {{history: {json.dumps(fields)}}}}}\n"
        pol = policy(tmp_path, rule, f"p{i}")
        base = Baselines({f"p{i}/h": baseline_for(rng, steps, base_values, seed % 3)}, "mem")
        got = outcomes(pol, run, base)
        with monkeypatch.context() as m:
            m.setattr(History, "_judge", reference_judge)
            want = outcomes(pol, run, base)
        assert got == want
        statuses.add(got[0][0])
    assert statuses >= ({Status.PASS, Status.FAIL} if seed < 2 else {Status.ERROR})


def outcomes(pol, run, base) -> list:
    """The verdict's fields that judging decides (whole, and fed in chunks), and the
    plot overlay of the whole run."""
    out = []
    for result in [judge_whole(pol, run, base)] + [
        judge_chunked(pol, run, base, c) for c in (1, 17, 500)
    ]:
        out.append(
            (
                result.status,
                result.step,
                repr(result.value),
                result.message,
                result.violations,
                result.judged,
                repr(result.overlay),
                result.violating_steps,
            )
        )
    return out


def judge_whole(pol, run, base):
    ev = Evaluation(pol)
    ev.feed(run.series)
    (result,) = ev.verdict(run, final=True, history=base).results
    return result


def judge_chunked(pol, run, base, chunk):
    ev = Evaluation(pol)
    (s,) = run.series.values()
    for lo in range(0, len(s), chunk):
        part = Series(s.metric, s.steps[lo : lo + chunk], s.values[lo : lo + chunk], s.step_key)
        ev.feed({s.metric: part})
    (result,) = ev.verdict(run, final=True, history=base).results
    return result


@pytest.mark.parametrize(
    "fields",
    [
        {"rel_up": 0.1, "rel_down": 0.1},
        {"k_std": 3},
        {"abs_floor_up": 1.0, "abs_floor_down": 1.0},
        {"rel_up": 0.1, "rel_down": 0.1, "k_std": 3},
    ],
)
def test_a_baseline_that_overflows_is_an_error_never_a_pass(tmp_path, fields):
    """Trusted values near float64's limit: the mean or the std overflows to inf and a
    bound would become inf or NaN (0 * inf), a corridor nothing falls outside of. Found
    while speeding the check up (issue 14); the rule must say it cannot judge."""
    steps = np.arange(4, dtype=np.int64)
    huge = [1e308, 1.7e308, -1.7e308, 1.7e308]
    base = Baselines({"p/h": RuleBaseline({int(s): huge for s in steps})}, "mem")
    rule = f"  - {{id: h, metric: m, check: {{history: {json.dumps(fields)}}}}}\n"
    pol = policy(tmp_path, rule, "p")
    run = run_of(series("m", np.array([5.0, 6.0, 7.0, 8.0]), steps))
    for result in [judge_whole(pol, run, base), judge_chunked(pol, run, base, 1)]:
        assert result.status is Status.ERROR, result.message
        assert "the baseline at step 0 is not finite" in result.message
        assert "4 of 4 coordinates cannot be judged" in result.message
