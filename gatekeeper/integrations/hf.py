"""`GatekeeperCallback` for Hugging Face `transformers.Trainer` (and TRL's trainers,
which subclass it).

Every `on_log` (training logs and evaluation metrics) is observed at
`state.global_step`, with the names `WandbCallback` gives them (`loss` -> `train/loss`,
`eval_loss` -> `eval/loss`, on the `train/global_step` axis), so a policy written against
the run's wandb data gates the run in-process unchanged. When the gate fails the
callback sets `control.should_training_stop`: the Trainer finishes the step it is in and
stops. `on_train_end` judges the run as ended and writes the reports (rank 0 only;
every rank judges, so every rank stops at the same step).

Mirrors transformers 5.24 (`TrainerCallback`, `TrainerControl`,
`integrations.WandbCallback.on_log` / `rewrite_logs`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from gatekeeper.extras import message

    raise ImportError(message("hf", "gatekeeper.integrations.hf", "transformers")) from exc

from gatekeeper.inprocess.gate import PolicyInput
from gatekeeper.inprocess.rows import is_scalar
from gatekeeper.integrations.core import GateCallback
from gatekeeper.model import RunState

AXIS = "train/global_step"
# Logged once at the end; WandbCallback puts them in the run summary, not in a series.
SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
     "total_flos"}
)


def rewrite_logs(logs: Mapping[str, Any]) -> dict[str, Any]:
    """The metric names WandbCallback logs: `eval_x` -> `eval/x`, `test_x` -> `test/x`,
    anything else `train/x`."""
    out: dict[str, Any] = {}
    for key, value in logs.items():
        if key.startswith("eval_"):
            out["eval/" + key[5:]] = value
        elif key.startswith("test_"):
            out["test/" + key[5:]] = value
        else:
            out["train/" + key] = value
    return out


class GatekeeperCallback(GateCallback, TrainerCallback):
    """Gate a `Trainer` run with policy files. Add it with `callbacks=[...]`.

    - `policies`, `overrides`, `reports`, `on_fail`: as for `gatekeeper.Gate`; or pass
      a ready `gate`. Under on_fail="raise", `trainer.train()` raises `GateFailed`
      (after the reports are written); "stop" (default) ends training cleanly.
    - `wandb_names=False` keeps the Trainer's own names (`loss`, `eval_loss`).
    - Set `logging_steps=1` to judge every step, and `logging_nan_inf_filter=False`: by
      default the Trainer logs the running mean instead of a NaN/Inf loss, hiding it.
    """

    def __init__(
        self, policies: PolicyInput | None = None, *, wandb_names: bool = True, **options: Any
    ):
        """`options`: `gate`, `overrides`, `on_fail`, `reports` and the `Gate` options,
        exactly as `gatekeeper.integrations.core.GateCallback` takes them."""
        self.wandb_names = wandb_names
        self.axis = AXIS if wandb_names else "global_step"
        super().__init__(policies, **options)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        model = kwargs.get("model")
        config = {**args.to_sanitized_dict()}
        model_config = getattr(model, "config", None)
        if model_config is not None and hasattr(model_config, "to_dict"):
            config.update(model_config.to_dict())
        self.gate.update_run(name=args.run_name or None, config=config)
        if args.logging_nan_inf_filter:
            warnings.warn(
                "gatekeeper: TrainingArguments.logging_nan_inf_filter=True makes the Trainer "
                "log the running mean instead of a NaN/Inf loss, so a gate on train/loss "
                "cannot see it; set logging_nan_inf_filter=False",
                stacklevel=2,
            )

    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        logs: Mapping[str, Any] | None = None, **kwargs: Any,
    ) -> None:
        scalars = {k: v for k, v in (logs or {}).items() if k not in SUMMARY_KEYS and is_scalar(v)}
        if not scalars:
            return
        if self.wandb_names:
            scalars = rewrite_logs(scalars)

        def stop_training() -> None:
            control.should_training_stop = True

        self.judge(
            state.global_step, scalars, write=state.is_world_process_zero,
            stop_training=stop_training,
        )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.gate.finalize(state=RunState.FINISHED, write=state.is_world_process_zero)
