"""spike: robust rolling median/MAD over the previous window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gatekeeper.errors import PolicyError
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

RULE = "  - {{id: s, metric: train/loss, check: {{spike: {args}}}}}\n"


def noisy(n: int = 300, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2.0 - np.linspace(0, 1, n) + rng.normal(0, 0.01, n)


def test_loss_spike_is_caught_at_its_step(tmp_path):
    values = noisy()
    values[200] += 0.5
    r = judge(
        policy(tmp_path, RULE.format(args="{window: 20, factor: 6}")),
        run_of(series("train/loss", values)),
    )
    assert r.status is Status.FAIL and r.step == 200 and r.violations == 1
    assert "spike x = " in r.message and "previous 20 points" in r.message


def test_noise_and_a_drop_pass_an_upward_spike_check(tmp_path):
    values = noisy()
    values[150] -= 0.5  # a drop is not a spike up
    pol = policy(tmp_path, RULE.format(args="{window: 20, factor: 6}"))
    assert judge(pol, run_of(series("train/loss", values))).status is Status.PASS
    both = policy(tmp_path, RULE.format(args="{window: 20, factor: 6, direction: both}"), name="b")
    r = judge(both, run_of(series("train/loss", values)))
    assert r.status is Status.FAIL and r.step == 150


def test_constant_series_has_zero_mad(tmp_path):
    flat = np.ones(50)
    pol = policy(tmp_path, RULE.format(args="{window: 10}"))
    assert judge(pol, run_of(series("train/loss", flat))).status is Status.PASS
    bumped = flat.copy()
    bumped[30] = 1.001  # any rise over a constant window is infinitely many MADs
    assert judge(pol, run_of(series("train/loss", bumped))).step == 30
    tolerant = policy(tmp_path, RULE.format(args="{window: 10, min_scale: 0.01}"), name="t")
    assert judge(tolerant, run_of(series("train/loss", bumped))).status is Status.PASS


def test_window_longer_than_the_data(tmp_path):
    pol = policy(tmp_path, RULE.format(args="{window: 20}"))
    run = run_of(series("train/loss", noisy(15)))
    live = judge(pol, run, final=False)
    assert live.status is Status.PENDING and "needs 21 points" in live.message
    assert judge(pol, run).status is Status.ERROR


def test_nan_inside_a_window_is_an_error_at_its_step(tmp_path):
    values = noisy(60)
    values[40] = math.nan
    r = judge(
        policy(tmp_path, RULE.format(args="{window: 10}")), run_of(series("train/loss", values))
    )
    assert r.status is Status.ERROR and r.step == 40 and "non-finite" in r.message


def test_live_polls_judge_like_the_whole_run(tmp_path):
    values = noisy(500, seed=3)
    values[[120, 121, 377]] += 0.4
    pol = policy(tmp_path, RULE.format(args="{window: 25, factor: 6}"))
    run = run_of(series("train/loss", values))
    whole = judge(pol, run)
    for chunk in (1, 7, 100):
        polled = judge_in_chunks(pol, run, chunk)
        assert (polled.status, polled.step, polled.violations, polled.judged) == (
            whole.status,
            whole.step,
            whole.violations,
            whole.judged,
        )
    assert whole.step == 120 and whole.judged == 475


def test_params_are_validated_with_file_and_line(tmp_path):
    with pytest.raises(PolicyError, match=r"p.yaml:4: rules\[0\].check.spike.window"):
        policy(tmp_path, RULE.format(args="{window: 1}"))
    with pytest.raises(PolicyError, match="reduce must be none"):
        policy(tmp_path, "  - {id: s, metric: m, reduce: mean, check: {spike: 5}}\n")


@pytest.mark.parametrize("window", [9, 10])
@pytest.mark.parametrize("direction", ["down", "both"])
def test_a_spike_near_the_float_limit_is_caught(tmp_path, window, direction):
    """Near 1e308 an even window's median (a + b) / 2 overflowed to Inf, so did the
    deviations and the MAD, and Inf > Inf is false: a drop to -1.7e308 after 1.7e308s
    passed. The values are now scaled down by a power of two first, exactly."""
    values = np.full(30, 1.7e308)
    values[20] = -1.7e308
    args = f"{{window: {window}, factor: 5, direction: {direction}}}"
    pol = policy(tmp_path, RULE.format(args=args))
    r = judge(pol, run_of(series("train/loss", values)))
    assert r.status is Status.FAIL and r.step == 20 and r.violations == 1
    assert judge_in_chunks(pol, run_of(series("train/loss", values)), 7).step == 20


def test_scaled_values_give_the_same_verdicts():
    """Scaling by 2^k is exact: values x 2^1000 (beyond HUGE: the scaled path) with
    min_scale x 2^1000 flag the very points the values do."""
    from gatekeeper.checks import spike

    rng = np.random.default_rng(11)
    values = rng.normal(1.0, 0.1, 2000)
    values[rng.integers(40, 2000, 30)] += rng.choice([-1.0, 1.0], 30)
    values[500:560] = 1.0  # MAD 0: min_scale decides
    for direction in ("up", "down", "both"):
        small = spike.Spike(window=20, factor=4, direction=direction, min_scale=0.05)
        big = spike.Spike(window=20, factor=4, direction=direction, min_scale=0.05 * 2.0**1000)
        want = small.violations(values, 0)
        assert want.sum() > 10
        assert np.array_equal(big.violations(np.ldexp(values, 1000), 0), want)
