"""miles' in-trainer CI checks, rewritten as a reference that judges a sequence of log dicts.

Mirrors radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76 (read there; the code below
is ours). Each check, where miles runs it, and when it asserts:

- `check_kl` (`miles/backends/training_utils/ci_utils.py`), called from the Megatron train
  loop only (`backends/megatron_utils/model.py`; the FSDP actor never calls it), on the
  actor's train log dict, under `--ci-test` and not `--ci-disable-kl-checker`:
  at `step_id == 0` (the first step of EVERY rollout) and only when the dict holds both
  `train/ppo_kl` and `train/pg_clipfrac`: MLA `ppo_kl < 1e-8` (signed, no clipfrac);
  LoRA `|ppo_kl| < 1e-8`; else `|ppo_kl| < 1e-9`; both of the latter with
  `|pg_clipfrac| < 1e-10`. At `accumulated_step_id == 0` (rollout 0, step 0 of the whole
  run; a resumed run never has it), when `train/kl_loss` is in the dict and not
  `--use-rollout-routing-replay`: `|kl_loss| < 1e-9`.
- `check_grad_norm` (same file), Megatron and FSDP, every train step, rank 0: with
  `--ci-load-grad-norm` (and no `--ci-save-grad-norm`, which wins) the saved norm of the same (rollout_id, step_id) must satisfy
  `math.isclose(g, ref, rel_tol=0.03, abs_tol=0.03)`; a missing saved file raises.
  Without it nothing is asserted (a NaN grad_norm passes).
- `check_mtp_loss` (`backends/megatron_utils/ci_utils.py`), Megatron only, each train step
  with `--enable-mtp-training`: `mtp_loss < 1.0` (the value logged as `train/mtp_loss`).
- log-prob checker (`backends/training_utils/log_utils.py` `log_rollout_data`), both
  backends, each rollout's reduced log dict, under `--ci-test` and not
  `--ci-disable-logprobs-checker`: at rollout 0 `isclose(log_probs, ref_log_probs,
  abs_tol=1e-8)` (5e-3 under R3); every rollout `isclose(log_probs, rollout_log_probs,
  abs_tol=0.03)` and `0 < entropy < 0.7`; each only if its keys are in the dict.
- TITO (`miles/ray/rollout/metrics.py` `_compute_metrics_from_samples`), under `--ci-test`,
  wherever samples carry a TITO mismatch: the rollout's `rollout/` dict AND each eval
  dataset's `eval/<name>/` dict: the `special_token_count`, `special_token_type`,
  `non_assistant_text` rates `== 0` (a missing one reads as 0); `assistant_text` free.
- MetricChecker (`miles/utils/metric_checker.py`, driven by `ray/rollout/rollout_manager.py`),
  under `--ci-test` with `--ci-metric-checker-key`: each eval's metrics must hold the key
  (`is not None`: a NaN is a value), and at dispose some eval must have had
  `value >= threshold` (a NaN never does). A skipped eval (`log_eval_skip`) is not seen.

Some asserts fire before miles logs the value (TITO, MTP); the cases here are the logs a
run writes with those asserts moved out of the trainer, which is what gatekeeper judges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Event = tuple[str, dict[str, Any], str]  # (process, log dict, step key), in log order

TITO_STRICT = ("special_token_count", "special_token_type", "non_assistant_text")


@dataclass(frozen=True)
class Failure:
    """The first assert a miles run would hit: which check, on which keys, where."""

    check: str
    keys: tuple[str, ...]
    where: str


def _megatron(args: Mapping[str, Any]) -> bool:
    return args.get("train_backend", "megatron") == "megatron"


def check_kl(args: Mapping[str, Any], log: Mapping[str, Any], step_id: int,
             accumulated_step_id: int) -> Failure | None:
    at = f"train/step {log['train/step']}"
    if step_id == 0 and "train/ppo_kl" in log and "train/pg_clipfrac" in log:
        kl, clip = log["train/ppo_kl"], log["train/pg_clipfrac"]
        if args.get("multi_latent_attention"):
            bad = () if kl < 1e-8 else ("train/ppo_kl",)
        else:
            bound = 1e-8 if args.get("lora_rank", 0) > 0 else 1e-9
            bad = tuple(k for k, ok in (("train/ppo_kl", abs(kl) < bound),
                                        ("train/pg_clipfrac", abs(clip) < 1e-10)) if not ok)
        if bad:
            return Failure("check_kl", bad, at)
    if (accumulated_step_id == 0 and "train/kl_loss" in log
            and not args.get("use_rollout_routing_replay")):
        if not abs(log["train/kl_loss"]) < 1e-9:
            return Failure("check_kl", ("train/kl_loss",), at)
    return None


def check_grad_norm(args: Mapping[str, Any], grad_norm: float, saved: float | None,
                    at: str) -> Failure | None:
    # a run given both flags saves and asserts nothing
    if args.get("ci_save_grad_norm") is not None or args.get("ci_load_grad_norm") is None:
        return None
    if saved is None or not math.isclose(grad_norm, saved, rel_tol=0.03, abs_tol=0.03):
        return Failure("check_grad_norm", ("train/grad_norm",), at)
    return None


def check_mtp_loss(log: Mapping[str, Any]) -> Failure | None:
    if "train/mtp_loss" in log and not log["train/mtp_loss"] < 1.0:
        return Failure("check_mtp_loss", ("train/mtp_loss",), f"train/step {log['train/step']}")
    return None


def check_logprobs(args: Mapping[str, Any], rollout_id: int,
                   log: Mapping[str, Any]) -> Failure | None:
    at = f"rollout/step {rollout_id}"
    lp = log.get("rollout/log_probs")
    if rollout_id == 0 and lp is not None and "rollout/ref_log_probs" in log:
        tol = 5e-3 if args.get("use_rollout_routing_replay") else 1e-8
        if not math.isclose(lp, log["rollout/ref_log_probs"], abs_tol=tol):
            return Failure("logprobs", ("rollout/log_probs", "rollout/ref_log_probs"), at)
    if lp is not None and "rollout/rollout_log_probs" in log:
        if not math.isclose(lp, log["rollout/rollout_log_probs"], abs_tol=0.03):
            return Failure("logprobs", ("rollout/log_probs", "rollout/rollout_log_probs"), at)
    if "rollout/entropy" in log and not 0 < log["rollout/entropy"] < 0.7:
        return Failure("logprobs", ("rollout/entropy",), at)
    return None


def check_tito(args: Mapping[str, Any], log: Mapping[str, Any], at: str) -> Failure | None:
    server = args.get("use_session_server")
    version = "v1" if server is True else server
    if version not in ("v1", "v2"):
        return None
    # the mean mismatch rate is logged whenever the samples carried a TITO result
    for prefix in [k for k in log if k.endswith(f"tito_session_mismatch_rate/{version}")]:
        for kind in TITO_STRICT:
            key = f"{prefix}/{kind}"
            if log.get(key, 0) != 0:
                return Failure("tito", (key,), at)
    return None


class MetricChecker:
    """`on_eval` at every evaluation, `dispose` when the run ends."""

    def __init__(self, args: Mapping[str, Any]) -> None:
        self.key = args["ci_metric_checker_key"]
        self.threshold = args["ci_metric_checker_threshold"]
        self.reached = False

    def on_eval(self, log: Mapping[str, Any]) -> Failure | None:
        value = log.get(self.key)
        if value is None:
            return Failure("metric_checker", (self.key,), f"eval/step {log['eval/step']}")
        self.reached |= value >= self.threshold
        return None

    def dispose(self) -> Failure | None:
        return None if self.reached else Failure("metric_checker", (self.key,), "dispose")


def _saved_grad_norms(reference: Iterable[Event] | None) -> dict[int, float]:
    """Run A's `--ci-save-grad-norm` files, one per (rollout_id, step_id) = train/step."""
    return {m["train/step"]: m["train/grad_norm"] for _, m, key in reference or ()
            if key == "train/step"}


def _train_step(args: Mapping[str, Any], log: Mapping[str, Any],
                saved: Mapping[int, float]) -> Failure | None:
    step = log["train/step"]
    n = args.get("num_steps_per_rollout") or 1
    rollout_id, step_id = divmod(step, n)
    if _megatron(args) and args.get("enable_mtp_training"):
        if failure := check_mtp_loss(log):
            return failure
    if _megatron(args) and not args.get("ci_disable_kl_checker"):
        if failure := check_kl(args, log, step_id, rollout_id * n + step_id):
            return failure
    return check_grad_norm(args, log["train/grad_norm"], saved.get(step), f"train/step {step}")


def _rollout(args: Mapping[str, Any], log: Mapping[str, Any]) -> Failure | None:
    rollout_id = log["rollout/step"]
    if failure := check_tito(args, log, f"rollout/step {rollout_id}"):
        return failure
    if args.get("ci_disable_logprobs_checker"):
        return None
    return check_logprobs(args, rollout_id, log)


def _eval(args: Mapping[str, Any], log: Mapping[str, Any],
          checker: MetricChecker | None) -> Failure | None:
    if any(k.startswith("eval/skipped_") for k in log):
        return None  # log_eval_skip: no samples, no MetricChecker call
    if failure := check_tito(args, log, f"eval/step {log['eval/step']}"):
        return failure
    return checker.on_eval(log) if checker is not None else None


def miles_verdict(args: Mapping[str, Any], events: Iterable[Event],
                  reference: Iterable[Event] | None = None) -> Failure | None:
    """None where miles' run passes its CI checks; else the first assert it hits.
    `reference`: run A's events, for a run B with `ci_load_grad_norm`."""
    if not args.get("ci_test"):
        return None
    saved = _saved_grad_norms(reference)
    checker = MetricChecker(args) if args.get("ci_metric_checker_key") is not None else None
    for _, log, step_key in events:
        if step_key == "train/step":
            failure = _train_step(args, log, saved)
        elif step_key == "rollout/step":
            failure = _rollout(args, log)
        else:
            failure = _eval(args, log, checker)
        if failure is not None:
            return failure
    return checker.dispose() if checker is not None else None
