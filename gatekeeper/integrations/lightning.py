"""`GatekeeperCallback` for the Lightning `Trainer` (`lightning.pytorch`, or the older
`pytorch_lightning` package).

It judges what the loggers receive — the metrics `self.log(...)` recorded, with their
logger names (`train_loss`, or `train_loss_step` / `_epoch` when also logged per epoch),
at the step a logger gets them (WandbLogger's `trainer/global_step`) — but at every
optimizer step, ahead of `log_every_n_steps`. It reads the values Lightning already holds
for the step (each logged metric's step cache, reduced at `self.log` time when the module
asked for `sync_dist`), never `_logger_connector.metrics`, whose progress-bar entries are
turned into Python numbers (a device sync) on every read. Epoch aggregates are read when
the epoch ends and validation metrics when validation ends, where Lightning reduces them
itself.

Stopping (mode="async", default): step N's values are captured at the end of step N (their
device copy queued behind the optimizer step) and sent to the judge from
`on_train_batch_start` of step N+1, by when the copy has landed on a launch-bound step (the
training thread writes them; else the gate's sender thread waits for the copy, as it does
for any copy still in flight); the callback waits for that judgement in
`on_before_backward` of step N+1, before DDP's
gradient all-reduce, and a failing rank posts "stop at N+1" on the process group's store
(`gatekeeper.integrations.agree`); every rank reads the key at the end of each step and
all stop after step N+1. No collective on a passing step. mode="sync" judges at the end of
step N and agrees with `strategy.reduce_boolean_decision`: stops after step N, at one
all-reduce per step. Reports are written once: by the rank whose gate failed, else rank 0.

Mirrors lightning 2.6: `Callback` hooks, `_ResultCollection.metrics` / `_get_cache`
(which values and names loggers get), `_LoggerConnector.update_train_step_metrics`,
`WandbLogger.log_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - the pre-2.0 package name
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError as exc:
        from gatekeeper.extras import message

        raise ImportError(
            message("lightning", "gatekeeper.integrations.lightning", "lightning")
        ) from exc

from gatekeeper.inprocess.gate import GateFailed
from gatekeeper.inprocess.rows import is_scalar
from gatekeeper.integrations.core import NAMES_KEPT, GateCallback
from gatekeeper.model import RunState

AXIS = "trainer/global_step"


def _logged(trainer: pl.Trainer, on_step: bool, names: _Names) -> dict[str, Any]:
    """The metrics Lightning hands its loggers for a step (`on_step`) or an epoch, as the
    tensors it holds (no `.item()`), plus the `epoch` it adds for them."""
    results = trainer._results
    if results is None:
        return {}
    metrics: dict[str, Any] = {}
    for _, result_metric in results.valid_items():
        if not result_metric.meta.logger:
            continue
        value = results._get_cache(result_metric, on_step)
        if value is not None and is_scalar(value):
            metrics[names.forked(results, result_metric, on_step)] = value
    if metrics:
        metrics.setdefault("epoch", trainer.current_epoch)
    return metrics


class _Names:
    """The logger name of each logged metric (`_forked_name`), worked out once per metric
    and step/epoch: a metric's meta is fixed once logged (Lightning refuses a second
    `self.log` of the key with other arguments), and this runs at every step."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, bool], tuple[Any, Any, str]] = {}

    def forked(self, results: Any, metric: Any, on_step: bool) -> str:
        hit = self._kept.get((id(metric), on_step))
        if hit is not None and hit[0] is metric and hit[1] is metric.meta:
            return hit[2]
        name: str = results._forked_name(metric, on_step)[1]
        if len(self._kept) >= NAMES_KEPT:  # metrics made afresh: keep the newest only
            self._kept.clear()
        self._kept[(id(metric), on_step)] = (metric, metric.meta, name)
        return name


def _logger_step(trainer: pl.Trainer) -> int:
    """The step loggers receive with these metrics (batches that stepped the optimizer)."""
    return int(trainer.fit_loop.epoch_loop._batches_that_stepped)


class GatekeeperCallback(GateCallback, pl.Callback):
    """Gate a Lightning run with policy files. Add it with `Trainer(callbacks=[...])`.

    `policies`, `overrides`, `reports`, `on_fail`, `mode`: as for `gatekeeper.Gate`, or pass a
    ready `gate`. Under on_fail="raise", `trainer.fit()` raises `GateFailed` after the
    reports are written; "stop" (default) ends training cleanly.
    """

    axis = AXIS
    _names: _Names | None = None  # the logger names worked out, once a hook needs them

    def _metrics(self, trainer: pl.Trainer, on_step: bool) -> dict[str, Any]:
        if self._names is None:  # made here: `validate()` runs no fit hook before it
            self._names = _Names()
        return _logged(trainer, on_step, self._names)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        hparams = getattr(pl_module, "hparams", None)
        if isinstance(hparams, Mapping):
            self.gate.update_run(config=dict(hparams))
        self.is_zero = trainer.is_global_zero
        if trainer.world_size > 1:
            from gatekeeper.integrations.agree import StopChannel

            self.channel = StopChannel.for_process_group()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.release()  # the last step's values: their copy has landed by now, most times

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any
    ) -> None:
        self.settle_before_collective()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        # Loggers get nothing for a batch that only accumulated gradients.
        if trainer.fit_loop._should_accumulate() and pl_module.automatic_optimization:
            return

        def stop_training() -> None:
            trainer.should_stop = True

        def agree(stop: bool) -> bool:  # mode="sync": every rank stops at the same step
            return bool(trainer.strategy.reduce_boolean_decision(stop, all=False))

        self.boundary(
            _logger_step(trainer), self._metrics(trainer, True), stop_training=stop_training,
            agree=agree if trainer.world_size > 1 else None, hold=True,
        )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.hand_over(_logger_step(trainer), self._metrics(trainer, False))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The fit loop logs epoch metrics at the epoch's last step, not the next one.
        self.hand_over(max(_logger_step(trainer) - 1, 0), self._metrics(trainer, False))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.finish(RunState.FINISHED)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, GateFailed):
            self.finish(RunState.CRASHED)
