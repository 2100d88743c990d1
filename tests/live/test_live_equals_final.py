"""Live = final on the same data, for every shipped check kind.

Each kind gets series that pass on the whole run after a bad-looking start, and series
that fail. Fed poll by poll (uneven chunks), no live verdict may fail a rule that the
whole run passes — that is what would stop a healthy run — and the completed feed gives
the same verdict as `check` on the whole run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gatekeeper.checks import registry
from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import Status
from tests.helpers import write_policy

N = 120
RNG = np.random.default_rng(7)
NOISE = RNG.normal(0, 0.01, N)
STEADY = 0.5 + NOISE
EARLY_HIGH = np.where(np.arange(N) < 15, 1.0, 0.5) + NOISE  # clipped early, healthy later
RISING = np.linspace(0.0, 1.0, N) + NOISE
LATE_HIGH = np.where(np.arange(N) > 60, 1.0, 0.5) + NOISE  # healthy start, clipped later
NAN_LATE = STEADY.copy()
NAN_LATE[90] = np.nan

# kind -> (check YAML, series that pass as a whole, series that fail)
CASES: dict[str, tuple[str, list[np.ndarray], list[np.ndarray]]] = {
    "max": ("{max: 0.6}", [STEADY], [EARLY_HIGH]),
    "min": ("{min: 0.4}", [STEADY], [RISING]),
    "abs_max": ("{abs_max: 0.6}", [STEADY], [EARLY_HIGH]),
    "between": ("{between: [0.4, 0.6]}", [STEADY], [RISING]),
    "approx": ("{approx: {value: 0.5, abs: 0.1}}", [STEADY], [EARLY_HIGH]),
    "finite": ("{finite: true}", [STEADY], [NAN_LATE]),
    "reach": ("{reach: {value: 0.75, by_step: 100, window: 5}}", [RISING], [STEADY]),
    "spike": ("{spike: {window: 10, factor: 8, min_scale: 0.05}}", [STEADY], [EARLY_HIGH[::-1]]),
    "trend": ("{trend: {window: 20, max_slope: 0.002}}", [STEADY], [RISING]),
    "flat": ("{flat: {window: 10, min_std: 0.001}}", [STEADY], [np.full(N, 0.5)]),
    "fraction": ("{fraction: {above: 0.9, max: 0.2}}", [EARLY_HIGH], [LATE_HIGH]),
    "history": ("{history: {rel_up: 0.2, rel_down: 0.2}}", [STEADY], []),  # no store: skip
    "stale": ("{stale: {max_seconds: 60}}", [STEADY], []),  # wall-clock only: live kind
    "lt": ("{lt: 0.6}", [STEADY], [EARLY_HIGH]),
    "gt": ("{gt: 0.4}", [STEADY], [RISING]),
    "abs_lt": ("{abs_lt: 0.6}", [STEADY], [EARLY_HIGH]),
    "strictly_between": ("{strictly_between: [0.4, 0.6]}", [STEADY], [RISING]),
    "rise": ("{rise: {from_step: 0, by_step: 100, min: 0.3}}", [RISING], [STEADY]),
    # a point at every step of m itself; its failures need other metrics' steps: live =
    # final for those in tests/test_engine_patterns.py (present_at cases)
    "present_at": ("{present_at: m}", [STEADY, NAN_LATE], []),
    # compared with REFERENCE (the STEADY run) at every step
    "isclose": ("{isclose: {reference: ref, rel_tol: 0.1, abs_tol: 0.05}}", [STEADY + 0.01],
                [LATE_HIGH]),
}
REFERENCE = {"ref": Run(name="ref", source="mem", series={
    "m": Series("m", np.arange(N, dtype=np.int64), STEADY.copy(), "train/step")})}


def test_every_shipped_kind_is_covered() -> None:
    assert set(CASES) == set(registry())


def _run(values: np.ndarray) -> Run:
    s = Series("m", np.arange(values.size, dtype=np.int64), values, "train/step")
    return Run(name="r", source="mem", series={"m": s})


def _chunks(n: int) -> list[tuple[int, int]]:
    cuts, i = [0], 0
    while i < n:
        i = min(n, i + int(RNG.integers(1, 9)))
        cuts.append(i)
    return list(zip(cuts, cuts[1:], strict=False))


@pytest.mark.parametrize("kind", sorted(CASES))
def test_live_never_stops_what_the_whole_run_passes(kind: str, tmp_path: Path) -> None:
    check, passing, failing = CASES[kind]
    text = f"version: 1\nname: p\nrules:\n  - {{id: r, metric: m, check: {check}}}\n"
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    for values, expect_fail in [(v, False) for v in passing] + [(v, True) for v in failing]:
        whole = evaluate(policies, _run(values), final=True, references=REFERENCE).results[0]
        assert whole.gating is expect_fail, (kind, whole.message)
        ev = Evaluation(policies)
        for lo, hi in _chunks(values.size):
            part = Series("m", np.arange(lo, hi, dtype=np.int64), values[lo:hi], "train/step")
            ev.feed({"m": part})
            live = ev.verdict(_run(values[:hi]), final=False, references=REFERENCE).results[0]
            if live.gating:  # a live failure would stop the run: the whole run must fail
                assert whole.gating, f"{kind}: live {live.status} at {hi}: {live.message}"
            if not expect_fail:
                assert live.status is not Status.FAIL, (kind, hi, live.message)
        fed = ev.verdict(_run(values), final=True, references=REFERENCE).results[0]
        assert (fed.status, fed.message) == (whole.status, whole.message)
