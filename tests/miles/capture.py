"""miles' CI metric capture and its harness merge, rewritten for tests from the behaviour of
radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:

- `miles/utils/tracking_utils/tracking.py`: `log(args, metrics, step_key)` passes
  `step = metrics.get(step_key)` (None when the dict has no step) to every backend;
- `miles/utils/tracking_utils/ci_history.py` (`CiHistoryBackend`): only the 7
  `TARGET_METRIC_KEYS` are kept; each process owns `<pid>-<uuid hex>.jsonl` in the
  harness's directory; every `log()` that captured something rewrites the whole file
  (temp file + rename) as `{"metric": key, "series": [[step, value], ...]}` lines in
  first-seen key order; non-finite values are the strings "NaN", "Infinity", "-Infinity";
  a bool or other non-number raises TypeError;
- `tests/ci/ci_utils.py` (`_merge_attempt_records`): the `*.jsonl` files of an attempt, in
  sorted name order, are concatenated per metric and sorted by `(step is None, step)`
  (stable), then written one line per metric.

Plus `miles_log`, the metrics a healthy miles RL run logs, step by step, as its trainer and
rollout manager pass them to `tracking.log` (every key, captured or not).
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TARGET_METRIC_KEYS: tuple[str, ...] = (
    "train/grad_norm",
    "train/ppo_kl",
    "train/train_rollout_logprob_abs_diff",
    "train/train_rollout_kl",
    "rollout/raw_reward",
    "rollout/tito_session_mismatch_rate/v1/assistant_text",
    "rollout/tito_session_mismatch_rate/v2/assistant_text",
)


def encode_value(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


@dataclass
class CiCapture:
    """One logging process's capture backend (the trainer, or the rollout manager)."""

    record_dir: Path
    pid: int
    series: dict[str, list[tuple[int | None, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.record_dir / f"{self.pid}-{uuid.uuid4().hex}.jsonl"

    def log(self, metrics: dict[str, Any], step_key: str) -> None:
        """`tracking.log(args, metrics, step_key)` as it reaches the capture backend."""
        step = metrics.get(step_key)
        captured = []
        for key in TARGET_METRIC_KEYS:
            if key not in metrics:
                continue
            value = metrics[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"CI history metric {key!r} must be int or float")
            captured.append((key, float(value)))
        for key, value in captured:
            self.series.setdefault(key, []).append((step, value))
        if captured:
            self._snapshot()

    def _snapshot(self) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for key, points in self.series.items():
                line = {"metric": key, "series": [[s, encode_value(v)] for s, v in points]}
                f.write(json.dumps(line, allow_nan=False) + "\n")
        os.replace(tmp, self.path)


def merge_attempt(attempt_dir: Path, merged_path: Path) -> Path:
    """miles' CI harness merge of one attempt's per-process records."""
    merged: dict[str, list[list[Any]]] = {}
    for name in sorted(os.listdir(attempt_dir)):
        if not name.endswith(".jsonl"):
            continue
        with open(attempt_dir / name, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    rec = json.loads(line)
                    merged.setdefault(rec["metric"], []).extend(rec["series"])
    for points in merged.values():
        points.sort(key=lambda p: (p[0] is None, p[0]))
    with open(merged_path, "w", encoding="utf-8") as f:
        for metric, points in merged.items():
            f.write(json.dumps({"metric": metric, "series": points}) + "\n")
    return merged_path


@dataclass(frozen=True)
class Variant:
    """The miles flags that change what a healthy run logs and what check_kl asserts."""

    name: str = "default"
    lora_rank: int = 0
    multi_latent_attention: bool = False
    use_kl_loss: bool = False
    use_rollout_routing_replay: bool = False
    num_steps_per_rollout: int = 1
    train_backend: str = "megatron"  # --train-backend; check_kl runs in megatron only
    start_rollout_id: int | None = 0  # as logged at wandb.init: 0 fresh, None resumed

    def config(self) -> dict[str, Any]:
        return {
            "train_backend": self.train_backend,
            "start_rollout_id": self.start_rollout_id,
            "lora_rank": self.lora_rank,
            "multi_latent_attention": self.multi_latent_attention,
            "use_kl_loss": self.use_kl_loss,
            "use_rollout_routing_replay": self.use_rollout_routing_replay,
            "num_steps_per_rollout": self.num_steps_per_rollout,
        }

    def config_flags(self) -> list[str]:
        out = []
        for k, v in self.config().items():
            text = "null" if v is None else str(v).lower() if isinstance(v, bool) else v
            out += ["--config", f"{k}={text}"]
        return out


VARIANTS = (
    Variant(),
    Variant("kl-loss", use_kl_loss=True),
    Variant("lora", lora_rank=16),
    Variant("mla", multi_latent_attention=True),
    Variant("r3", use_rollout_routing_replay=True, use_kl_loss=True),
    Variant("4-steps-per-rollout", num_steps_per_rollout=4, use_kl_loss=True),
)


def _rollout_start_kl(v: Variant) -> float:
    """ppo_kl at the first step of a rollout in a healthy run of this variant: the values
    each branch of check_kl exists for (LoRA rounding, MLA's small negative mismatch)."""
    if v.multi_latent_attention:
        return -4e-6  # negative: miles' signed MLA assert passes it
    if v.lora_rank:
        return 5e-9  # above the default 1e-9, below LoRA's 1e-8
    return 0.0


def miles_log(
    v: Variant, rollouts: int = 6
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(process, metrics, step_key) in the order a healthy run logs them."""
    n = v.num_steps_per_rollout
    for r in range(rollouts):
        rollout: dict[str, Any] = {
            "rollout/step": r,
            "rollout/raw_reward": 0.5 + 0.03 * r,
            "rollout/log_probs": -0.42 - 0.001 * r,
            "rollout/rollout_log_probs": -0.425 - 0.001 * r,
            "rollout/entropy": 0.45 - 0.01 * r,
        }
        if r == 0:
            gap = 2e-3 if v.use_rollout_routing_replay else 1e-9
            rollout["rollout/ref_log_probs"] = rollout["rollout/log_probs"] + gap
        yield "rollout", rollout, "rollout/step"
        for s in range(n):
            step = r * n + s
            train: dict[str, Any] = {
                "train/step": step,
                "train/loss": 0.4 - 0.01 * step,
                "train/pg_loss": 0.1,
                "train/entropy_loss": 0.45 - 0.005 * step,
                "train/ppo_kl": _rollout_start_kl(v) if s == 0 else 1e-3 * (s + 1),
                "train/pg_clipfrac": 0.0 if s == 0 else 0.02,
                "train/grad_norm": 0.2 + 0.01 * (step % 3),
                "train/train_rollout_logprob_abs_diff": 0.021 + 0.0001 * step,
                "train/train_rollout_kl": 0.0012,
            }
            if v.use_kl_loss:
                # with R3 the reference does not replay routing: kl_loss is not 0 at step 0,
                # which is why check_kl skips it under --use-rollout-routing-replay
                first = 3e-4 if v.use_rollout_routing_replay else 0.0
                train["train/kl_loss"] = first if step == 0 else 1e-4 * step
            yield "trainer", train, "train/step"


def capture_run(
    attempt_dir: Path, v: Variant, rollouts: int = 6, edit: Any = None
) -> Path:
    """Run `miles_log` through one capture backend per process; `edit(process, metrics)`
    may change what a step logs (a broken run). Returns the attempt directory."""
    procs = {"trainer": CiCapture(attempt_dir, 1201), "rollout": CiCapture(attempt_dir, 1202)}
    for process, metrics, step_key in miles_log(v, rollouts):
        if edit is not None:
            metrics = dict(metrics)
            edit(process, metrics)  # changes the step's dict in place
        procs[process].log(metrics, step_key)
    return attempt_dir
