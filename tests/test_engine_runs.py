"""The engine's run lengths of violations at the violating points only (`runs_at`)
against the definition, counted point by point: the same run length at every violating
point and at the mask's end, for random masks of every density, runs at either end, and
a carried run from the chunk before; and `for: N` verdicts fed whole and poll by poll
follow it."""

from __future__ import annotations

import numpy as np

from gatekeeper.engine.judgement import runs_at


def _run_lengths(mask: np.ndarray, carry: int) -> np.ndarray:
    """The definition: the length of the run of consecutive True ending at each index,
    `carry` continuing a run from before the first."""
    out, run = [], carry
    for violates in mask.tolist():
        run = run + 1 if violates else 0
        out.append(run)
    return np.array(out, dtype=np.int64)


def test_runs_at_the_violating_points_are_the_dense_ones() -> None:
    rng = np.random.default_rng(40)
    for trial in range(4000):
        n = int(rng.integers(1, 200))
        density = rng.choice([0.01, 0.1, 0.5, 0.9, 1.0])
        mask = rng.random(n) < density
        if trial % 5 == 0:
            mask[: int(rng.integers(0, n + 1))] = True  # a run from the first point
        if trial % 7 == 0:
            mask[int(rng.integers(0, n)) :] = True  # a run to the last point
        if not mask.any():
            mask[int(rng.integers(0, n))] = True
        carry = int(rng.choice([0, 0, 1, 3, 10**6]))
        dense = _run_lengths(mask, carry)
        where = np.flatnonzero(mask)
        runs, last = runs_at(where, n, carry)
        assert np.array_equal(runs, dense[where]), (trial, mask, carry)
        assert last == int(dense[-1]), (trial, mask, carry)
        for for_ in (1, 2, 3, 5, 50):  # the first point that fires, as the engine asks
            want = np.flatnonzero(dense >= for_)
            got = where[runs >= for_]
            assert np.array_equal(got, want), (trial, for_)


def test_for_n_verdicts_whole_and_in_chunks_follow_the_dense_runs(tmp_path) -> None:
    """A `for: N` rule's failing step is the first point where the dense run length
    reaches N, whether the run is judged whole or fed in chunks (runs carried across)."""
    from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

    rng = np.random.default_rng(41)
    for trial in range(30):
        n = 400
        values = rng.uniform(0.0, 1.0, n)
        values[rng.random(n) < rng.choice([0.05, 0.3, 0.6])] = 5.0  # violations
        for_ = int(rng.integers(1, 5))
        rule = f"  - {{id: m, metric: m, for: {for_}, check: {{max: 1.5}}}}\n"
        pol = policy(tmp_path, rule, f"p{trial}")
        run = run_of(series("m", values))
        dense = _run_lengths(values > 1.5, 0)
        fired = np.flatnonzero(dense >= for_)
        results = [judge(pol, run)] + [judge_in_chunks(pol, run, c) for c in (1, 7, 64)]
        for r in results:
            assert r.violations == int((values > 1.5).sum())
            if fired.size:
                assert r.status.value == "fail" and r.step == int(fired[0]), (trial, r)
            else:
                assert r.status.value == "pass", (trial, r)
