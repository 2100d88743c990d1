"""`GatekeeperCallback` for Hugging Face `transformers.Trainer` (and TRL's trainers,
which subclass it).

Every `on_log` (training logs and evaluation metrics) is handed to the gate at
`state.global_step`, with the names `WandbCallback` gives them (`loss` -> `train/loss`,
`eval_loss` -> `eval/loss`, on the `train/global_step` axis), so a policy written against
the run's wandb data gates the run in-process unchanged. Under mode="async" (default) a
judge process judges step N while step N+1 runs, and the run stops after step N+1:

- `on_log(N)` captures step N's values (device tensors copied without a sync) but holds
  them: with `logging_steps=1` the Trainer has just called `.item()` on the loss, so the
  device is idle and every moment of Python before step N+1's first launches is lost.
- `on_pre_optimizer_step(N+1)` (forward and backward are queued) sends them to the judge.
- The judgement is awaited in `on_log(N+1)`, after the Trainer's own sync, when this step
  logs (else in `on_step_end(N+1)`), and sets `control.should_training_stop`.

Under mode="sync" `on_log` judges at once and the run stops after step N.

Distributed: every rank judges, with no collective of its own. The values are the same on
every rank because the Trainer made them so: it all-gathers the loss and averages it
before logging, `grad_norm` is the norm of the all-reduced gradients, the learning rate
is shared; identical values give identical decisions at the same boundary. Only rank 0
writes the reports.

Mirrors transformers 5.25 (`TrainerCallback`, `TrainerControl`,
`Trainer._maybe_log_save_evaluate`, `integrations.WandbCallback.on_log` / `rewrite_logs`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from gatekeeper.extras import message

    raise ImportError(message("hf", "gatekeeper.integrations.hf", "transformers")) from exc

from gatekeeper.inprocess.gate import Mode, PolicyInput
from gatekeeper.inprocess.rows import is_scalar
from gatekeeper.integrations.core import NAMES_KEPT, GateCallback
from gatekeeper.model import RunState

AXIS = "train/global_step"
# Logged once at the end; WandbCallback puts them in the run summary, not in a series.
SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
     "total_flos"}
)


def _name(key: str, wandb_names: bool) -> str:
    """The name a logged key is judged by: WandbCallback's (`eval_x` -> `eval/x`,
    `test_x` -> `test/x`, anything else `train/x`), or the key itself."""
    if not wandb_names:
        return key
    if key.startswith("eval_"):
        return "eval/" + key[5:]
    if key.startswith("test_"):
        return "test/" + key[5:]
    return "train/" + key


def rewrite_logs(logs: Mapping[str, Any]) -> dict[str, Any]:
    """The metric names WandbCallback logs, for a whole log."""
    return {_name(key, True): value for key, value in logs.items()}


class GatekeeperCallback(GateCallback, TrainerCallback):
    """Gate a `Trainer` run with policy files. Add it with `callbacks=[...]`.

    - `policies`, `overrides`, `reports`, `on_fail`, `mode`: as for `gatekeeper.Gate`; or pass
      a ready `gate`. Under on_fail="raise", `trainer.train()` raises `GateFailed`
      (after the reports are written); "stop" (default) ends training cleanly.
    - `wandb_names=False` keeps the Trainer's own names (`loss`, `eval_loss`).
    - Set `logging_steps=1` to judge every step, and `logging_nan_inf_filter=False`: by
      default the Trainer logs the running mean instead of a NaN/Inf loss, hiding it.
    """

    # async: hold a step's values until the next step's backward is queued and await the
    # judgement after the Trainer's sync (False: hand over at once, await in on_step_end;
    # bench/bench_inprocess_gpu.py compares the two)
    _defer = True

    def __init__(
        self, policies: PolicyInput | None = None, *, wandb_names: bool = True, **options: Any
    ):
        """`options`: `gate`, `overrides`, `on_fail`, `mode`, `reports` and the `Gate` options,
        exactly as `gatekeeper.integrations.core.GateCallback` takes them."""
        self.wandb_names = wandb_names
        self.axis = AXIS if wandb_names else "global_step"
        self._settle_in_log = False  # async: this step's log awaits the judgement
        self._names: dict[str, str | None] = {}  # logged key -> judged name (None: summary)
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
        self.is_zero = state.is_world_process_zero
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
        if self._settle_in_log:  # async: the previous steps, judged during this one
            self._settle_in_log = False
            self.settle_at_boundary()
            self.decide(_stopper(control))
        scalars = self._series(logs or {})
        if not scalars:
            return
        self.hand_over(state.global_step, scalars, hold=self.mode is Mode.ASYNC and self._defer)
        if self.mode is Mode.SYNC:
            self.settle_at_boundary()
            self.decide(_stopper(control))

    def _series(self, logs: Mapping[str, Any]) -> dict[str, Any]:
        """The logged numbers that go into series, by the names the gate judges (one pass:
        this runs at every step; each key's name is worked out once)."""
        names, out = self._names, {}
        for key, value in logs.items():
            try:
                name = names[key]
            except KeyError:  # a key seen for the first time
                name = None if key in SUMMARY_KEYS else _name(key, self.wandb_names)
                if len(names) < NAMES_KEPT:
                    names[key] = name
            if name is not None and is_scalar(value):
                out[name] = value
        return out

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.release()  # the step's forward and backward are queued: judging overlaps them

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.begin_boundary()
        if self.mode is not Mode.ASYNC:
            return
        # DefaultFlowCallback (first in line) has set should_log for this step: when it
        # logs, wait after the Trainer's own sync there, not before it here.
        self._settle_in_log = bool(control.should_log) and self._defer
        if not self._settle_in_log:
            self.settle_at_boundary()
            self.decide(_stopper(control))

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.finish(RunState.FINISHED)


def _stopper(control: TrainerControl) -> Callable[[], None]:
    def stop_training() -> None:
        control.should_training_stop = True

    return stop_training
