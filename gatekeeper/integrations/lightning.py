"""`GatekeeperCallback` for the Lightning `Trainer` (`lightning.pytorch`, or the older
`pytorch_lightning` package).

It judges what the loggers receive — the metrics `self.log(...)` recorded, with their
logger names (`train_loss`, or `train_loss_step` / `_epoch` when also logged per epoch),
at the step a logger gets them (WandbLogger's `trainer/global_step`) — but at every
optimizer step, ahead of `log_every_n_steps`: a NaN at step 37 stops the run at step
37 even when the loggers would have seen it at step 50. Validation metrics are judged
when validation ends, epoch aggregates at the end of each training epoch. When the gate
fails it sets `trainer.should_stop` (agreed across ranks, as EarlyStopping does);
`on_train_end` judges the run as ended and writes the reports (rank 0).

Mirrors lightning 2.6: `Callback` hooks, `_LoggerConnector.update_train_step_metrics`
(which metrics and which step loggers get), `WandbLogger.log_metrics`.
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
from gatekeeper.integrations.core import GateCallback
from gatekeeper.model import RunState

AXIS = "trainer/global_step"


def _logged(trainer: pl.Trainer) -> dict[str, Any]:
    """The metrics Lightning would hand its loggers now (step values during a batch,
    epoch values at an epoch's end), plus the `epoch` it adds for them."""
    connector = trainer._logger_connector
    if trainer._results is None:
        return {}
    metrics: dict[str, Any] = {
        k: v for k, v in connector.metrics["log"].items() if is_scalar(v)
    }
    if metrics:
        metrics.setdefault("epoch", trainer.current_epoch)
    return metrics


def _logger_step(trainer: pl.Trainer) -> int:
    """The step loggers receive with these metrics (batches that stepped the optimizer)."""
    return int(trainer.fit_loop.epoch_loop._batches_that_stepped)


class GatekeeperCallback(GateCallback, pl.Callback):
    """Gate a Lightning run with policy files. Add it with `Trainer(callbacks=[...])`.

    `policies`, `overrides`, `reports`, `on_fail`: as for `gatekeeper.Gate`, or pass a
    ready `gate`. Under on_fail="raise", `trainer.fit()` raises `GateFailed` after the
    reports are written; "stop" (default) ends training cleanly.
    """

    axis = AXIS

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        hparams = getattr(pl_module, "hparams", None)
        if isinstance(hparams, Mapping):
            self.gate.update_run(config=dict(hparams))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:
        # Loggers get nothing for a batch that only accumulated gradients.
        if trainer.fit_loop._should_accumulate() and pl_module.automatic_optimization:
            return
        self._observe(trainer, _logged(trainer), _logger_step(trainer))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._observe(trainer, _logged(trainer), _logger_step(trainer))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The fit loop logs epoch metrics at the epoch's last step, not the next one.
        self._observe(trainer, _logged(trainer), max(_logger_step(trainer) - 1, 0))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.gate.finalize(state=RunState.FINISHED, write=trainer.is_global_zero)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, GateFailed):
            self.gate.finalize(state=RunState.CRASHED, write=trainer.is_global_zero)

    def _observe(self, trainer: pl.Trainer, metrics: dict[str, Any], step: int) -> None:
        if not metrics:
            return

        def stop_training() -> None:
            trainer.should_stop = True

        def agree(stop: bool) -> bool:  # every rank must stop at the same step
            return bool(trainer.strategy.reduce_boolean_decision(stop, all=False))

        self.judge(
            step, metrics, write=trainer.is_global_zero, stop_training=stop_training,
            agree=agree if trainer.world_size > 1 else None,
        )
