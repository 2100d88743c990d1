"""The shipped miles pack on records written as miles' CI capture writes them (per-process
`<pid>-<uuid>.jsonl` files, the 7 captured keys, "NaN" markers, merged by concatenation and
a stable sort), mirroring radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76
(`ci_history.py`, `tests/ci/ci_utils.py::_merge_attempt_records`, `ci_utils.py::check_kl`).
Both the attempt directory and the harness's merged file are judged, and must agree.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gatekeeper import gate
from gatekeeper.sources import RunOverrides
from gatekeeper.verdict import Status, Verdict
from tests.helpers import REPO, gatekeeper
from tests.miles.capture import TARGET_METRIC_KEYS, VARIANTS, Variant, capture_run, merge_attempt

PACK = str(REPO / "policies" / "miles")
POLICIES = gate.load([PACK], [])


def record(tmp_path: Path, v: Variant, edit: Any = None, rollouts: int = 6) -> tuple[Path, Path]:
    """An attempt directory as miles' harness lays it out, and its merged record."""
    key = tmp_path / "tests_e2e_test_qwen3_0.6B.py-0123456789"
    attempt = capture_run(key / "attempt-0", v, rollouts, edit)
    return attempt, merge_attempt(attempt, key / "attempt-0.merged.jsonl")


def judge(path: Path, v: Variant | None) -> Verdict:
    config = v.config() if v is not None else {}
    return gate.check(str(path), POLICIES, RunOverrides(config=config))


def by_rule(verdict: Verdict) -> dict[str, Any]:
    return {f"{r.policy}/{r.rule}": r for r in verdict.results}


def test_the_capture_writes_what_miles_writes(tmp_path: Path) -> None:
    attempt, merged = record(tmp_path, Variant(use_kl_loss=True))
    files = sorted(p.name for p in attempt.iterdir())
    assert len(files) == 2 and all(f.endswith(".jsonl") and "-" in f for f in files)
    metrics = {json.loads(line)["metric"] for line in merged.read_text().splitlines()}
    # pg_clipfrac and kl_loss were logged by the trainer but are not captured
    assert metrics == set(TARGET_METRIC_KEYS) - {
        "rollout/tito_session_mismatch_rate/v1/assistant_text",
        "rollout/tito_session_mismatch_rate/v2/assistant_text",
    }


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_healthy_record_passes_under_every_variant(tmp_path: Path, v: Variant) -> None:
    attempt, merged = record(tmp_path, v)
    for path in (attempt, merged):
        verdict = judge(path, v)
        assert verdict.exit_code == 0, [
            (r.rule, r.status, r.message) for r in verdict.results if r.status is not Status.PASS
        ]
        rules = by_rule(verdict)
        # what a CI record cannot carry is a visible skip, with the reason
        clip = rules["miles-ci-consistency/pg-clipfrac-rollout-start"]
        if not v.multi_latent_attention:
            assert clip.status is Status.SKIP
            assert "not captured by the CI record (if_logged)" in clip.message
            assert clip.not_judged == "not captured by the CI record"
        kl_loss = rules["miles-ci-consistency/kl-loss-step0"]
        assert kl_loss.status is Status.SKIP
    assert judge(attempt, v).run["name"] == judge(merged, v).run["name"] == (
        "tests_e2e_test_qwen3_0.6B.py-0123456789"
    )


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_negative_ppo_kl_at_step0_fails_under_every_variant(tmp_path: Path, v: Variant) -> None:
    def broken(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == 0:
            m["train/ppo_kl"] = -0.3

    attempt, merged = record(tmp_path, v, broken)
    for path in (attempt, merged):
        verdict = judge(path, v)
        assert verdict.exit_code == 1
        failing = [r for r in verdict.results if r.status is Status.FAIL]
        assert failing and all(r.metric == "train/ppo_kl" and r.step == 0 for r in failing)


def test_ppo_kl_at_a_later_rollout_start_fails(tmp_path: Path) -> None:
    """check_kl runs at step_id == 0 of every rollout: with one step per rollout, step 7."""

    def broken(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == 7:
            m["train/ppo_kl"] = 0.05

    v = Variant()
    _, merged = record(tmp_path, v, broken, rollouts=10)
    rule = by_rule(judge(merged, v))["miles-ci-consistency/ppo-kl-rollout-start"]
    assert rule.status is Status.FAIL and rule.step == 7 and rule.value == 0.05


def test_rollout_start_follows_num_steps_per_rollout(tmp_path: Path) -> None:
    """With 4 steps per rollout, step 7 is inside rollout 1 (ppo_kl may move there) and step
    8 starts rollout 2 (it must be ~0)."""
    v = Variant(num_steps_per_rollout=4)

    def at(step: int):
        def edit(process: str, m: dict[str, Any]) -> None:
            if m.get("train/step") == step:
                m["train/ppo_kl"] = 0.05

        return edit

    _, inside = record(tmp_path / "a", v, at(7))
    assert judge(inside, v).exit_code == 0
    _, start = record(tmp_path / "b", v, at(8))
    rule = by_rule(judge(start, v))["miles-ci-consistency/ppo-kl-rollout-start"]
    assert rule.status is Status.FAIL and rule.step == 8


def test_strict_bounds_as_miles_asserts_them(tmp_path: Path) -> None:
    """miles asserts abs(ppo_kl) < 1e-9: exactly 1e-9 fails; LoRA's 1e-8 bound admits 5e-9."""

    def exactly(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == 2:
            m["train/ppo_kl"] = 1e-9

    _, merged = record(tmp_path, Variant(), exactly)
    rule = by_rule(judge(merged, Variant()))["miles-ci-consistency/ppo-kl-rollout-start"]
    assert rule.status is Status.FAIL and rule.step == 2
    lora = Variant(lora_rank=16)  # healthy LoRA runs log 5e-9 at rollout starts
    _, merged = record(tmp_path / "lora", lora)
    assert judge(merged, Variant()).exit_code == 1  # judged as the default variant: fails
    assert judge(merged, lora).exit_code == 0


def test_nan_grad_norm_fails(tmp_path: Path) -> None:
    def nan(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == 3:
            m["train/grad_norm"] = math.nan

    attempt, merged = record(tmp_path, Variant(), nan)
    assert '"NaN"' in merged.read_text()
    for path in (attempt, merged):
        verdict = judge(path, Variant())
        assert verdict.exit_code == 1
        rule = by_rule(verdict)["miles-ci-capture/grad-norm-finite"]
        assert rule.status is Status.ERROR and rule.step == 3 and "non-finite" in rule.message


@pytest.mark.parametrize("metric", ["train/grad_norm", "rollout/raw_reward", "train/ppo_kl"])
def test_a_never_logged_captured_metric_fails(tmp_path: Path, metric: str) -> None:
    def drop(process: str, m: dict[str, Any]) -> None:
        m.pop(metric, None)

    _, merged = record(tmp_path, Variant(), drop)
    verdict = judge(merged, Variant())
    assert verdict.exit_code == 1
    errors = [r for r in verdict.results if r.status is Status.ERROR]
    assert errors and all(r.metric == metric for r in errors)
    assert any("is not in the run" in r.message for r in errors)


def test_conditional_captured_metrics_are_skipped_with_a_reason(tmp_path: Path) -> None:
    """train_rollout_* exist only when the rollout returns log-probs: miles has nothing to
    judge without them, and says so."""

    def drop(process: str, m: dict[str, Any]) -> None:
        m.pop("train/train_rollout_kl", None)

    _, merged = record(tmp_path, Variant(), drop)
    verdict = judge(merged, Variant())
    assert verdict.exit_code == 0
    rule = by_rule(verdict)["miles-ci-capture/train-rollout-kl-finite"]
    assert rule.status is Status.SKIP and "if_logged" in rule.message


def test_record_without_config_is_an_error_naming_the_flags(tmp_path: Path) -> None:
    """A record carries no config: the pack does not silently judge it as the default
    variant, it asks for the flags."""
    _, merged = record(tmp_path, Variant())
    verdict = judge(merged, None)
    assert verdict.exit_code == 1
    kl = by_rule(verdict)["miles-ci-consistency/ppo-kl-rollout-start"]
    assert kl.status is Status.ERROR
    assert "--config lora_rank=0" in kl.message and "num_steps_per_rollout=..." in kl.message
    # the policies that need no config are still judged
    assert by_rule(verdict)["miles-ci-capture/grad-norm-finite"].status is Status.PASS


def test_null_step_is_an_error_on_that_metric_only(tmp_path: Path) -> None:
    """tracking.log takes the step from the dict; a rollout dict without rollout/step is
    captured with step null, and miles' gate fails that metric only."""

    def no_step(process: str, m: dict[str, Any]) -> None:
        if m.get("rollout/step") == 2:
            del m["rollout/step"]

    attempt, merged = record(tmp_path, Variant(), no_step)
    assert "[null, " in merged.read_text()
    for path in (attempt, merged):
        verdict = judge(path, Variant())
        assert verdict.exit_code == 1
        rules = by_rule(verdict)
        raw = rules["miles-ci-capture/raw-reward-finite"]
        assert raw.status is Status.ERROR and "null step" in raw.message
        assert rules["miles-ci-capture/grad-norm-finite"].status is Status.PASS
        assert rules["miles-ci-consistency/ppo-kl-rollout-start"].status is Status.PASS


def test_duplicate_step_is_an_error_on_that_metric_only(tmp_path: Path) -> None:
    """Two processes logging the same key at the same step (e.g. two actors) merge into
    one series with the step twice; the values cannot be told apart."""
    v = Variant()
    attempt = capture_run(tmp_path / "k" / "attempt-0", v)
    from tests.miles.capture import CiCapture

    CiCapture(attempt, 1303).log({"rollout/step": 3, "rollout/raw_reward": 0.9}, "rollout/step")
    merged = merge_attempt(attempt, tmp_path / "k" / "attempt-0.merged.jsonl")
    for path in (attempt, merged):
        rules = by_rule(judge(path, v))
        raw = rules["miles-ci-capture/raw-reward-finite"]
        assert raw.status is Status.ERROR and "duplicate rollout/step 3 (2 points)" in raw.message
        assert rules["miles-ci-capture/grad-norm-finite"].status is Status.PASS


def test_cli_exit_codes_and_config_flags(tmp_path: Path) -> None:
    v = Variant(lora_rank=16)
    _, merged = record(tmp_path, v)
    ok = gatekeeper("check", str(merged), "-p", PACK, *v.config_flags())
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bare = gatekeeper("check", str(merged), "-p", PACK, "-q")
    assert bare.returncode == 1 and "miles-ci-consistency" in bare.stdout


def test_null_step_is_an_error_while_live_too(tmp_path: Path) -> None:
    """`gatekeeper watch` on the attempt directory miles writes into agrees with `check`."""
    from gatekeeper.engine import Evaluation
    from gatekeeper.sources.jsonl.live import LiveJsonlSource

    def no_step(process: str, m: dict[str, Any]) -> None:
        if m.get("rollout/step") == 2:
            del m["rollout/step"]

    attempt, _ = record(tmp_path, Variant(), no_step)
    source = LiveJsonlSource(str(attempt))
    ev = Evaluation(POLICIES)
    poll = source.poll()
    ev.feed(poll.series)
    run = RunOverrides(config=Variant().config()).apply(poll.run)
    rules = by_rule(ev.verdict(run, final=True))
    raw = rules["miles-ci-capture/raw-reward-finite"]
    assert raw.status is Status.ERROR and "null step" in raw.message
    assert rules["miles-ci-capture/grad-norm-finite"].status is Status.PASS
