"""The shipped miles pack on the full log miles writes to Weights & Biases (the real SDK,
offline), mirroring radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76: every key of
the trainer's and rollout manager's log dicts (pg_clipfrac, kl_loss with --use-kl-loss,
log-probs, entropy), on miles' step axes, with `config=args.__dict__`.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gatekeeper import gate
from gatekeeper.verdict import Status, Verdict
from tests.miles.capture import VARIANTS, Variant, miles_log
from tests.wandb.conftest import sdk_env

WRITER = Path(__file__).with_name("wandb_writer.py")
REPO = Path(__file__).resolve().parents[2]
POLICIES = gate.load(
    [str(REPO / "policies" / "miles"), str(REPO / "policies" / "rl-health.yaml")], []
)


def _marker(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def wandb_run(root: Path, v: Variant, edit: Any = None, extra_config: dict | None = None,
              extra_events: list[dict[str, Any]] | None = None, rollouts: int = 10) -> Path:
    """Log `miles_log(v)` (changed by `edit(process, metrics)`) with the SDK; the `wandb/` dir."""
    events = []
    for process, metrics, _ in miles_log(v, rollouts):
        metrics = dict(metrics)
        if edit is not None:
            edit(process, metrics)
        events.append({k: _marker(x) for k, x in metrics.items()})
    events += extra_events or []
    # miles logs all its args; the keys the pack reads are among them
    config = {**v.config(), "ci_test": True, "clip_grad": 1.0, **(extra_config or {})}
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "spec.json"
    spec.write_text(json.dumps({"config": config, "events": events}))
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(spec)], env=sdk_env(root), cwd=root,
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root / "wandb"


def by_rule(verdict: Verdict) -> dict[str, Any]:
    return {f"{r.policy}/{r.rule}": r for r in verdict.results}


def not_passing(verdict: Verdict) -> list[tuple[str, str, str]]:
    return [(r.rule, r.status.value, r.message) for r in verdict.results
            if r.gating and r.status is not Status.PASS]


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_healthy_full_log_passes(tmp_path: Path, v: Variant) -> None:
    verdict = gate.check(str(wandb_run(tmp_path, v)), POLICIES)
    assert verdict.exit_code == 0, not_passing(verdict)
    rules = by_rule(verdict)
    kl_loss = rules["miles-ci-consistency/kl-loss-step0"]
    if not v.use_kl_loss:  # no --use-kl-loss: miles logs no kl_loss, nothing to judge
        assert kl_loss.status is Status.SKIP and "not logged" in kl_loss.message
    elif v.use_rollout_routing_replay:  # miles skips it under R3
        assert kl_loss.status is Status.SKIP and "use_rollout_routing_replay" in kl_loss.message
    else:
        assert kl_loss.status is Status.PASS
    if not v.multi_latent_attention:  # the full log carries pg_clipfrac: judged
        assert rules["miles-ci-consistency/pg-clipfrac-rollout-start"].status is Status.PASS
    assert rules["miles-logprob-checker/logprobs-match-rollout-engine"].status is Status.PASS


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_negative_ppo_kl_at_step0_fails(tmp_path: Path, v: Variant) -> None:
    def broken(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == 0:
            m["train/ppo_kl"] = -0.3

    verdict = gate.check(str(wandb_run(tmp_path, v, broken)), POLICIES)
    assert verdict.exit_code == 1
    assert {r.metric for r in verdict.results if r.status is Status.FAIL} == {"train/ppo_kl"}


def test_failures_the_full_log_shows(tmp_path: Path) -> None:
    """In one run: ppo_kl 0.05 at step 7, pg_clipfrac at a rollout start, kl_loss at step 0,
    a NaN grad_norm, entropy exactly 0 (miles: 0 < entropy), the engine log-prob gap."""
    v = Variant(use_kl_loss=True)

    def broken(process: str, m: dict[str, Any]) -> None:
        step = m.get("train/step")
        if step == 7:
            m["train/ppo_kl"] = 0.05
        if step == 4:
            m["train/pg_clipfrac"] = 0.01
        if step == 0:
            m["train/kl_loss"] = 2e-9
        if step == 3:
            m["train/grad_norm"] = math.nan
        if m.get("rollout/step") == 2:
            m["rollout/entropy"] = 0.0
            m["rollout/rollout_log_probs"] = m["rollout/log_probs"] - 0.05

    rules = by_rule(gate.check(str(wandb_run(tmp_path, v, broken)), POLICIES))
    expect = {
        "miles-ci-consistency/ppo-kl-rollout-start": (Status.FAIL, 7),
        "miles-ci-consistency/pg-clipfrac-rollout-start": (Status.FAIL, 4),
        "miles-ci-consistency/kl-loss-step0": (Status.FAIL, 0),
        "miles-ci-capture/grad-norm-finite": (Status.ERROR, 3),
        "miles-logprob-checker/entropy-open-band": (Status.FAIL, 2),
        "miles-logprob-checker/logprobs-match-rollout-engine": (Status.FAIL, 2),
    }
    got = {k: (rules[k].status, rules[k].step) for k in expect}
    assert got == expect


def _per_test_keys(mtp: float, strict_rate: float, gsm8k: list[float]):
    def edit(process: str, m: dict[str, Any]) -> None:
        if process == "trainer":
            m["train/mtp_loss"] = mtp if m["train/step"] == 5 else 0.4
        else:
            base = "rollout/tito_session_mismatch_rate/v2"
            m[f"{base}/assistant_text"] = 0.1  # non-critical in miles: not asserted
            for kind in ("special_token_count", "special_token_type", "non_assistant_text"):
                m[f"{base}/{kind}"] = strict_rate if m["rollout/step"] == 3 else 0.0

    evals = [{"eval/step": i, "eval/gsm8k": x} for i, x in enumerate(gsm8k)]
    return edit, evals


def test_tito_mtp_and_metric_checker_packs(tmp_path: Path) -> None:
    """The per-test checks: TITO strict rates == 0, mtp_loss < 1.0 (strict), and
    MetricChecker's eval/gsm8k >= 0.71 at some eval (tests run with
    --ci-metric-checker-key eval/gsm8k --ci-metric-checker-threshold 0.71)."""
    config = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": 0.71}
    edit, evals = _per_test_keys(0.9, 0.0, [0.55, 0.71, 0.69])
    good = gate.check(
        str(wandb_run(tmp_path / "good", Variant(), edit, config, evals)), POLICIES
    )
    assert good.exit_code == 0, not_passing(good)
    rules = by_rule(good)
    assert rules["miles-metric-checker/key-reaches-threshold"].status is Status.PASS
    assert rules["miles-tito/v2-non-assistant-text"].status is Status.PASS
    assert rules["miles-tito/v1-non-assistant-text"].status is Status.SKIP

    edit, evals = _per_test_keys(1.0, 0.01, [0.55, 0.70, math.nan])
    bad = by_rule(gate.check(
        str(wandb_run(tmp_path / "bad", Variant(), edit, config, evals)), POLICIES
    ))
    assert (bad["miles-mtp/mtp-loss-below-1"].status, bad["miles-mtp/mtp-loss-below-1"].step) == (
        Status.FAIL, 5
    )
    for kind in ("special-token-count", "special-token-type", "non-assistant-text"):
        assert bad[f"miles-tito/v2-{kind}"].status is Status.FAIL
    assert bad["miles-metric-checker/key-at-every-eval"].status is Status.PASS
    every = bad["miles-metric-checker/key-finite"]
    assert every.status is Status.ERROR and every.step == 2
    assert bad["miles-metric-checker/key-reaches-threshold"].status is Status.ERROR


def test_metric_checker_below_threshold_fails_and_applies_only_to_its_tests(
    tmp_path: Path,
) -> None:
    # miles logs both args; the bound is the run's ci_metric_checker_threshold
    config = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": 0.71}
    evals = [{"eval/step": i, "eval/gsm8k": x} for i, x in enumerate([0.6, 0.7099])]
    rules = by_rule(gate.check(
        str(wandb_run(tmp_path / "low", Variant(), None, config, evals)), POLICIES
    ))
    low = rules["miles-metric-checker/key-reaches-threshold"]
    assert low.status is Status.FAIL and low.value == pytest.approx(0.7099)
    rules = by_rule(gate.check(str(wandb_run(tmp_path / "other", Variant())), POLICIES))
    other = rules["miles-metric-checker/key-reaches-threshold"]
    assert other.status is Status.SKIP and "ci_metric_checker_key" in other.message


def test_steps_per_rollout_derived_from_the_batch_when_miles_leaves_it_null(
    tmp_path: Path,
) -> None:
    """A run launched with --global-batch-size instead of --num-steps-per-rollout logs
    num_steps_per_rollout: null; miles trains rollout_batch_size * n_samples_per_prompt //
    global_batch_size steps per rollout (here 8 * 4 // 8 = 4), and the pack derives it."""
    v = Variant(num_steps_per_rollout=4)
    batch = {"num_steps_per_rollout": None, "rollout_batch_size": 8,
             "n_samples_per_prompt": 4, "global_batch_size": 8}

    def at(step: int):
        def edit(process: str, m: dict[str, Any]) -> None:
            if m.get("train/step") == step:
                m["train/ppo_kl"] = 0.05
        return edit

    healthy = gate.check(str(wandb_run(tmp_path / "ok", v, at(7), batch)), POLICIES)
    assert healthy.exit_code == 0, not_passing(healthy)  # step 7 is inside rollout 1
    rules = by_rule(gate.check(str(wandb_run(tmp_path / "bad", v, at(8), batch)), POLICIES))
    rule = rules["miles-ci-consistency/ppo-kl-rollout-start"]
    assert (rule.status, rule.step) == (Status.FAIL, 8)
