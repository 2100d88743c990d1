"""Issue 27, "faithful checks": the miles pack judges where miles judges, and skips where
miles skips, on runs written the way miles writes them (the real wandb SDK offline, and
miles' CI capture), mirroring radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:

- G5: `check_kl` is called only from `miles/backends/megatron_utils/model.py`; the FSDP
  actor never calls it. The backend is `args.train_backend` (`--train-backend`).
- G6: `check_kl`'s kl_loss assert runs at `accumulated_step_id == 0` and the log-prob
  checker compares with the reference at `rollout_id == 0`; a run resumed from a
  checkpoint starts at rollout `start_rollout_id > 0` and has neither. miles logs its args
  at `wandb.init`, before a checkpoint is read: `start_rollout_id` is 0 on a fresh run and
  null on a resume.
- G4/G3: MetricChecker asserts `max(eval) >= args.ci_metric_checker_threshold`, the test's
  own threshold (0.55 in tests/e2e/long/test_qwen2.5_0.5B_gsm8k*.py and
  tests/test_external_rollout.py).
- G19: `ci/r3_mismatch_fraction` is logged per train step by miles PR #2684 (not in
  31f1ca9, whose checker `replay_base.py::check_replay_result` raises above 1e-2).
- G18: the NVFP4 W4A16 recipe (miles PR #2864) passes `--ci-disable-kl-checker`; with the
  checker on, PR #2855's GLM-5.2 (MLA) run failed at ppo_kl = 1.5e-4 (required < 1e-8).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gatekeeper import gate
from gatekeeper.engine import Evaluation
from gatekeeper.model import Run, Series
from gatekeeper.policy.overrides import parse_override
from gatekeeper.sources import RunOverrides
from gatekeeper.verdict import Status, Verdict
from tests.helpers import REPO, gatekeeper, write_policy
from tests.miles.capture import Variant, capture_run
from tests.miles.test_miles_wandb import by_rule, not_passing, wandb_run

MILES = str(REPO / "policies" / "miles")
PACK = gate.load([MILES, str(REPO / "policies" / "rl-health.yaml")], [])
KL = "miles-ci-consistency/"
LOGP = "miles-logprob-checker/"


def statuses(verdict: Verdict, prefix: str) -> dict[str, Status]:
    return {k: r.status for k, r in by_rule(verdict).items() if k.startswith(prefix)}


# ---- G5: check_kl is Megatron-only ------------------------------------------------------


@dataclass(frozen=True)
class FsdpVariant(Variant):
    """miles' FSDP args (miles/backends/fsdp_utils/arguments.py) have no Megatron
    multi_latent_attention: the logged config lacks the key."""

    train_backend: str = "fsdp"

    def config(self) -> dict[str, Any]:
        return {k: v for k, v in super().config().items() if k != "multi_latent_attention"}


def _rollout_start_kl(value: float) -> Any:
    def edit(process: str, metrics: dict[str, Any]) -> None:
        if process == "trainer":
            metrics["train/ppo_kl"] = value
    return edit


def test_an_fsdp_run_gets_no_check_kl_bound_a_megatron_run_does(tmp_path: Path) -> None:
    """The same nonzero ppo_kl at every rollout start: miles' FSDP backend never asserts it,
    its Megatron backend does. An FSDP run's args have no multi_latent_attention (a
    Megatron arg), which must not matter."""
    edit = _rollout_start_kl(2e-4)
    verdict = gate.check(str(wandb_run(tmp_path / "fsdp", FsdpVariant(), edit)), PACK)
    assert verdict.exit_code == 0, not_passing(verdict)
    rules = by_rule(verdict)
    kl = [r for k, r in rules.items() if k.startswith(KL)]
    assert kl and all(r.status is Status.SKIP for r in kl)
    assert "config.train_backend != 'fsdp'" in rules[KL + "ppo-kl-rollout-start"].message
    # the log-prob checker runs in both backends: still judged
    assert rules[LOGP + "logprobs-match-ref-rollout0"].status is Status.PASS

    megatron = gate.check(str(wandb_run(tmp_path / "megatron", Variant(), edit)), PACK)
    failed = by_rule(megatron)[KL + "ppo-kl-rollout-start"]
    assert (failed.status, failed.step, failed.value) == (Status.FAIL, 0, 2e-4)


def test_a_record_that_does_not_name_its_backend_is_an_error_naming_the_flag(
    tmp_path: Path,
) -> None:
    """A CI record carries no config: without --config train_backend=... every check_kl
    rule is ERROR (exit 1, the data is incomplete), never the Megatron default."""
    attempt = capture_run(tmp_path / "key" / "attempt-0", Variant())
    config = {k: v for k, v in Variant().config().items() if k != "train_backend"}
    unsaid = by_rule(gate.check(str(attempt), PACK, RunOverrides(config=config)))
    kl = [r for k, r in unsaid.items() if k.startswith(KL)]
    assert kl and all(r.status is Status.ERROR for r in kl)
    assert "--config train_backend=megatron" in unsaid[KL + "ppo-kl-rollout-start"].message
    said = gate.check(str(attempt), PACK, RunOverrides(config=Variant().config()))
    assert said.exit_code == 0, not_passing(said)
    assert by_rule(said)[KL + "ppo-kl-rollout-start"].status is Status.PASS


# ---- G6: the step-0 checks on a resumed run ------------------------------------------------


def _resumed(start: int) -> Any:
    """A run resumed at rollout `start`: nothing before it is logged; after training the
    actor has moved away from the reference, so kl_loss and the reference gap are not 0."""
    def edit(process: str, metrics: dict[str, Any]) -> None:
        step_key = "train/step" if process == "trainer" else "rollout/step"
        if metrics[step_key] < start:
            metrics.clear()
            return
        if process == "rollout":
            metrics["rollout/ref_log_probs"] = metrics["rollout/log_probs"] + 0.01
        elif "train/kl_loss" in metrics:
            metrics["train/kl_loss"] = 3e-4
    return edit


def test_a_resumed_run_skips_the_step0_checks_as_miles_does(tmp_path: Path) -> None:
    """miles' tests/e2e/ckpt "load" run: rollouts 3.. only, start_rollout_id null in the
    logged args. kl_loss and the reference gap at the run's first step are not 0, and miles
    does not assert them there; `steps: first` would have judged (and failed) them."""
    v = Variant(use_kl_loss=True, start_rollout_id=None)
    verdict = gate.check(str(wandb_run(tmp_path, v, _resumed(3))), PACK)
    assert verdict.exit_code == 0, not_passing(verdict)
    rules = by_rule(verdict)
    for key in (KL + "kl-loss-step0", LOGP + "logprobs-match-ref-rollout0"):
        assert rules[key].status is Status.SKIP
        assert "needs config.start_rollout_id == 0 (run has None)" in rules[key].message
    # check_kl's step_id == 0 happens at every rollout, resumed or not: judged
    kl = rules[KL + "ppo-kl-rollout-start"]
    assert kl.status is Status.PASS and "7 points" in kl.message  # train/step 3..9


def test_a_resumed_run_still_fails_a_rollout_start_and_a_fresh_run_its_missing_step0(
    tmp_path: Path,
) -> None:
    v = Variant(use_kl_loss=True, start_rollout_id=None)
    resumed = _resumed(3)

    def bad_start(process: str, metrics: dict[str, Any]) -> None:
        resumed(process, metrics)
        if metrics.get("train/step") == 5:
            metrics["train/ppo_kl"] = 0.05
    failed = by_rule(gate.check(str(wandb_run(tmp_path / "bad", v, bad_start)), PACK))
    kl = failed[KL + "ppo-kl-rollout-start"]
    assert (kl.status, kl.step, kl.value) == (Status.FAIL, 5, 0.05)

    def drop_step0(process: str, metrics: dict[str, Any]) -> None:
        if metrics.get("train/step") == 0:
            del metrics["train/kl_loss"]
    fresh = Variant(use_kl_loss=True)  # start_rollout_id 0: step 0 must be there
    lost = by_rule(gate.check(str(wandb_run(tmp_path / "lost", fresh, drop_step0)), PACK))
    step0 = lost[KL + "kl-loss-step0"]
    assert step0.status is Status.ERROR and "train/step 0 missing" in step0.message


# ---- G4/G3: MetricChecker's threshold is the test's own ----------------------------------


def _evals(values: list[float]) -> list[dict[str, Any]]:
    return [{"eval/step": 10 * i, "eval/gsm8k": x} for i, x in enumerate(values)]


def test_metric_checker_judges_the_threshold_the_test_passed(tmp_path: Path) -> None:
    """tests/e2e/long/test_qwen2.5_0.5B_gsm8k.py: --ci-metric-checker-threshold 0.55."""
    reach = "miles-metric-checker/key-reaches-threshold"
    evals = _evals([0.31, 0.48, 0.57, 0.52])
    config = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": 0.55}
    long_test = by_rule(gate.check(
        str(wandb_run(tmp_path / "055", Variant(), None, config, evals)), PACK
    ))[reach]
    assert long_test.status is Status.PASS and long_test.expected == "max: x >= 0.55"

    config["ci_metric_checker_threshold"] = 0.71  # the short tests' threshold
    short_test = by_rule(gate.check(
        str(wandb_run(tmp_path / "071", Variant(), None, config, evals)), PACK
    ))[reach]
    assert (short_test.status, short_test.value) == (Status.FAIL, 0.57)
    assert "0.57 < 0.71" in short_test.message

    unset = by_rule(gate.check(str(wandb_run(
        tmp_path / "unset", Variant(), None, {"ci_metric_checker_key": "eval/gsm8k"}, evals
    )), PACK))[reach]
    assert unset.status is Status.ERROR
    assert "--config ci_metric_checker_threshold=" in unset.message
    assert unset.expected == "max: x >= config.ci_metric_checker_threshold"


def test_a_bound_from_config_needs_reduce_and_a_one_bound_check(tmp_path: Path) -> None:
    """Bad input is exit 2 with one line naming file:line: a rule judged point by point
    would be judged before the run's config is read; `between` has two bounds."""
    for check, reduce, why in (
        ("{min: config.t}", "", "needs reduce:"),
        ("{between: config.t}", "    reduce: max\n", "only a one-bound check"),
    ):
        policy = write_policy(tmp_path / "p.yaml", (
            "version: 1\nname: p\nrules:\n  - id: r\n    metric: m\n"
            f"{reduce}    check: {check}\n"
        ))
        out = gatekeeper("validate", str(policy))
        assert out.returncode == 2, out.stdout + out.stderr
        assert why in out.stderr and "p.yaml:" in out.stderr


# ---- G19: ci/r3_mismatch_fraction --------------------------------------------------------


def _r3(fractions: dict[int, float]) -> Any:
    """PR #2684: the trainer's per-step log dict carries the replay mismatch fraction."""
    def edit(process: str, metrics: dict[str, Any]) -> None:
        if process == "trainer":
            metrics["ci/r3_mismatch_fraction"] = fractions.get(metrics["train/step"], 0.0)
    return edit


def test_r3_mismatch_fraction_at_the_checkers_bound(tmp_path: Path) -> None:
    v = Variant(use_rollout_routing_replay=True, use_kl_loss=True)
    clean = gate.check(str(wandb_run(tmp_path / "clean", v, _r3({4: 0.01}))), PACK)
    assert clean.exit_code == 0, not_passing(clean)
    assert by_rule(clean)["miles-r3/r3-mismatch-fraction"].status is Status.PASS
    drift = by_rule(gate.check(str(wandb_run(tmp_path / "drift", v, _r3({6: 0.03}))), PACK))
    r3 = drift["miles-r3/r3-mismatch-fraction"]
    assert (r3.status, r3.value) == (Status.FAIL, 0.03)
    plain = by_rule(gate.check(str(wandb_run(tmp_path / "none", Variant())), PACK))
    assert plain["miles-r3/r3-mismatch-fraction"].status is Status.SKIP


# ---- G18: the NVFP4 W4A16 recipe and the override that replaces its bypass -----------------

BYPASS = (
    "miles-ci-consistency/ppo-kl-rollout-start-mla=off:NVFP4 W4A16 rollout vs fake-QAT "
    "training, ppo_kl ~1e-4 at a rollout start (miles PR 2855); miles states no bound"
)


def test_nvfp4_w4a16_recipe_and_the_override_that_replaces_the_kl_bypass(
    tmp_path: Path,
) -> None:
    """GLM-5.2 is MLA and the recipe runs R3 with --use-kl-loss: check_kl's MLA branch is
    the one --ci-disable-kl-checker switched off; with the override only that rule is off,
    with its reason, and the rest (our MLA floor, the R3 checker) still judge."""
    policies = gate.load([MILES, str(REPO / "policies" / "recipes")], [])
    v = Variant(multi_latent_attention=True, use_rollout_routing_replay=True, use_kl_loss=True)
    recipe = {"recipe": "nvfp4-w4a16"}

    def nvfp4(process: str, metrics: dict[str, Any]) -> None:
        _rollout_start_kl(1.5e-4)(process, metrics)
        _r3({})(process, metrics)
    run = str(wandb_run(tmp_path / "w4a16", v, nvfp4, recipe))
    bare = by_rule(gate.check(run, policies))
    assert bare[KL + "ppo-kl-rollout-start-mla"].status is Status.FAIL
    assert bare["recipe-nvfp4-w4a16/r3-checker-ran"].status is Status.PASS

    with_override = [MILES, str(REPO / "policies" / "recipes")]
    relaxed = gate.check(run, gate.load(with_override, [parse_override(BYPASS)]))
    rules = by_rule(relaxed)
    off = rules[KL + "ppo-kl-rollout-start-mla"]
    assert off.status is Status.SKIP and "miles states no bound" in off.message
    assert rules[KL + "ppo-kl-rollout-start-mla-floor"].status is Status.PASS
    assert relaxed.exit_code == 0, not_passing(relaxed)

    unchecked = str(wandb_run(tmp_path / "no-r3-metric", v, _rollout_start_kl(1.5e-4), recipe))
    missing = by_rule(gate.check(
        unchecked, gate.load(with_override, [parse_override(BYPASS)])
    ))["recipe-nvfp4-w4a16/r3-checker-ran"]
    assert missing.status is Status.ERROR and "ci/r3_mismatch_fraction" in missing.message


def test_a_bound_from_config_follows_the_config_live_and_through_a_saved_state() -> None:
    """The daemon feeds polls and saves the evaluation between them: the bound is bound at
    each verdict from the config it sees then, and a restored evaluation judges the same."""
    policies = gate.load([str(REPO / "policies" / "miles" / "metric-checker.yaml")], [])
    reach = "key-reaches-threshold"

    def run(threshold: Any) -> Run:
        config = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": threshold}
        return Run(name="r", source="s", config=config)

    def verdict(ev: Evaluation, threshold: Any) -> Any:
        return {r.rule: r for r in ev.verdict(run(threshold), final=True).results}[reach]

    ev = Evaluation(policies)  # the metric is the config's: fed with the run's metadata
    ev.feed({"eval/gsm8k": Series("eval/gsm8k", np.array([0, 10]), np.array([0.5, 0.6]),
                                  "eval/step")}, run(0.55))
    assert verdict(ev, 0.55).status is Status.PASS
    low = verdict(ev, 0.71)  # the config changed: bound again, not the first value kept
    assert low.status is Status.FAIL and low.expected == "max: x >= 0.71"
    assert verdict(ev, None).status is Status.ERROR
    saved = json.loads(json.dumps(ev.to_state()))
    again = Evaluation.from_state(policies, saved)
    again.feed({"eval/gsm8k": Series("eval/gsm8k", np.array([20]), np.array([0.72]),
                                     "eval/step")}, run(0.71))
    assert verdict(again, 0.71).status is Status.PASS
