"""The history check's corridor, as miles' metric-history gate defines it."""

from __future__ import annotations

import pytest

from gatekeeper.engine import evaluate
from gatekeeper.errors import PolicyError
from gatekeeper.history import Baselines, RuleBaseline
from gatekeeper.verdict import Status
from tests.checks.util import policy, run_of, series


def judged(
    tmp_path, check: str, value: float, past: list[float], *, steps: str = "[0]", positional=False
):
    pol = policy(
        tmp_path, f"  - {{id: h, metric: m, steps: {steps}, check: {{history: {check}}}}}\n"
    )
    run = run_of(series("m", [value, value]))
    coord = -1 if positional else 0
    base = Baselines({"p/h": RuleBaseline({coord: past}, positional)}, "mem")
    (r,) = evaluate(pol, run, history=base).results
    return r


def test_band_scales_from_the_reference_only(tmp_path):
    band = "{rel_up: 0.5, rel_down: 0.5}"
    assert judged(tmp_path, band, 0.74, [0.5]).status is Status.PASS
    r = judged(tmp_path, band, 0.76, [0.5])
    assert r.status is Status.FAIL and "above its corridor [0.25, 0.75]" in r.message
    assert judged(tmp_path, band, 0.24, [0.5]).status is Status.FAIL


def test_reference_is_the_mean_of_the_newest_n(tmp_path):
    past = [1.0, 1.0, 100.0]  # newest first: the old outlier falls outside last_n: 2
    assert (
        judged(tmp_path, "{rel_up: 0.1, rel_down: 0.1, last_n: 2}", 1.05, past).status
        is Status.PASS
    )
    assert judged(tmp_path, "{rel_up: 0.1, rel_down: 0.1}", 1.05, past).status is Status.FAIL


def test_an_absolute_floor_keeps_near_zero_metrics_quiet(tmp_path):
    check = "{rel_up: 0.2, abs_floor_up: 1.0e-6, rel_down: 0.2, abs_floor_down: 1.0e-6}"
    assert judged(tmp_path, check, 1e-7, [1e-9, 2e-9]).status is Status.PASS
    assert judged(tmp_path, check, 5e-3, [1e-9, 2e-9]).status is Status.FAIL


def test_k_std_self_calibrates(tmp_path):
    past = [1.0, 1.2, 0.8, 1.1, 0.9]  # mean 1, std ~0.141
    assert judged(tmp_path, "{k_std: 3}", 1.4, past).status is Status.PASS
    assert judged(tmp_path, "{k_std: 3}", 1.5, past).status is Status.FAIL


def test_no_history_is_inactive_not_a_failure(tmp_path):
    r = judged(tmp_path, "0.2", 5.0, [])
    assert r.status is Status.SKIP and r.message.startswith("inactive: no trusted history")
    pol = policy(tmp_path, "  - {id: h, metric: m, check: {history: 0.2}}\n", name="q")
    (r,) = evaluate(pol, run_of(series("m", [1.0]))).results
    assert r.status is Status.SKIP and "no baseline store" in r.message


def test_last_keys_on_its_position_not_its_step(tmp_path):
    r = judged(tmp_path, "0.1", 1.0, [1.0], steps="last", positional=True)
    assert r.status is Status.PASS and r.step == 1


def test_each_side_needs_a_band(tmp_path):
    with pytest.raises(PolicyError, match="band on the down side"):
        policy(tmp_path, "  - {id: h, metric: m, check: {history: {rel_up: 0.2}}}\n")
