"""rl-health/entropy-collapse judges what miles' monitoring guide calls the red flag
(radixark/miles 31f1ca9, docs/user-guide/monitoring.md: entropy_loss "falls to ~0 too fast
(mode collapse)"; healthy: "slowly decreasing"): the level, not the spread."""

from __future__ import annotations

import numpy as np

from gatekeeper.engine import evaluate
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import Status
from tests.checks.util import run_of, series
from tests.helpers import REPO

POLICIES = load_policies([str(REPO / "policies" / "rl-health.yaml")])


def entropy_rule(values) -> object:
    run = run_of(series("train/entropy_loss", values))
    (result,) = [r for r in evaluate(POLICIES, run).results if r.rule == "entropy-collapse"]
    return result


def test_a_healthy_plateau_does_not_fire() -> None:
    plateau = np.full(60, 0.31)  # flat to the last digit: the old spread rule fired here
    assert entropy_rule(plateau).status is Status.PASS


def test_a_noisy_fall_to_zero_fires() -> None:
    rng = np.random.default_rng(3)
    fall = np.clip(np.linspace(0.4, -0.05, 40) + rng.normal(0, 0.02, 40), 0, None)
    result = entropy_rule(fall)
    assert result.status is Status.WARN and result.value < 0.01


def test_one_noisy_low_point_does_not_fire() -> None:
    values = np.full(30, 0.3)
    values[10] = 0.001
    assert entropy_rule(values).status is Status.PASS
