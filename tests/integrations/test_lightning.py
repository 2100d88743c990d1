"""The Lightning callback on a real Lightning `Trainer` (CPU, a randomly initialized
two-layer MLP, a synthetic regression dataset, a few dozen steps).

Mirrors lightning 2.6: `Callback.on_train_batch_end`/`on_validation_end`,
`trainer.should_stop`, and what `WandbLogger.log_metrics` receives (metric names, the
`trainer/global_step` axis); the test's JSONL recorder is a real Lightning `Logger`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from gatekeeper.gate import ReportOptions  # noqa: E402
from gatekeeper.integrations.lightning import GatekeeperCallback  # noqa: E402
from tests.integrations.trainers import Recorder, check_results, comparable, policy  # noqa: E402


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 1))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        grad_proxy = torch.linalg.vector_norm(self.net[0].weight)
        self.log("train_loss", loss)
        self.log("weight_norm", grad_proxy, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Poison(pl.Callback):
    """Turns the first layer's weights NaN before batch `at`: that step's loss is NaN."""

    def __init__(self, at: int):
        self.at = at

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.at:
            with torch.no_grad():
                pl_module.net[0].weight.fill_(float("nan"))


class RecordLogger(pl.loggers.Logger):
    """The test's own logger: what Lightning hands its loggers, as JSONL records."""

    def __init__(self) -> None:
        super().__init__()
        self.recorder = Recorder("trainer/global_step")

    @property
    def name(self) -> str:
        return "record"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        assert step is not None
        self.recorder.add(step, metrics)


def data(n: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def fit(steps: int, callbacks: list[Any], logger: RecordLogger, tmp: Path) -> Any:
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=logger, log_every_n_steps=1,
        val_check_interval=10, callbacks=callbacks, enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, default_root_dir=str(tmp),
        num_sanity_val_steps=0,
    )
    trainer.fit(Regressor(), data(160, 0), data(32, 1))
    return trainer


def gate_policy(tmp: Path) -> Path:
    return policy(tmp / "policy.yaml", "train_loss", "weight_norm_step", extra="""
          - id: val-loss-finite
            metric: val_loss
            check: {finite: true}
          - id: val-loss-learns
            metric: val_loss
            steps: last
            check: {max: 5}
    """)


def reports(tmp: Path) -> ReportOptions:
    return ReportOptions(json_path=str(tmp / "gate.json"), junit_path=str(tmp / "gate.xml"),
                         quiet=True)


def test_healthy_run_passes_and_matches_check(tmp_path: Path) -> None:
    pol = gate_policy(tmp_path)
    logger = RecordLogger()
    trainer = fit(30, [GatekeeperCallback(pol, reports=reports(tmp_path))], logger, tmp_path)
    assert trainer.global_step == 30
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["status"] == "pass", report
    by_rule = {r["rule"]: r for r in report["results"]}
    assert by_rule["loss-finite"]["judged"] == 30
    assert by_rule["val-loss-finite"]["judged"] == 3  # validation every 10 batches
    cli = check_results(logger.recorder.write(tmp_path / "run.jsonl"), pol, tmp_path / "c.json")
    assert cli["status"] == "pass"
    assert comparable(report) == comparable(cli)


@pytest.mark.parametrize(("mode", "last"), [("async", 18), ("sync", 17)])
def test_nan_run_stops_at_the_offending_step(tmp_path: Path, mode: str, last: int) -> None:
    """Batch 17 (logged at step 17) is NaN: sync stops after it, async (judged while the
    next batch runs) after batch 18; both report step 17."""
    pol = gate_policy(tmp_path)
    logger = RecordLogger()
    gate = GatekeeperCallback(pol, mode=mode, reports=reports(tmp_path))
    trainer = fit(60, [Poison(at=17), gate], logger, tmp_path)
    assert trainer.global_step == last + 1  # the last batch run was logged at `last`
    assert max(s for s, _ in logger.recorder.series["train_loss"]) == last
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["status"] == "error"
    assert report["stopped"]["rule"] == "trainer-health/loss-finite"
    assert (report["stopped"]["step"], report["stopped"]["step_key"]) == (
        17, "trainer/global_step")
    assert "loss-finite" in (tmp_path / "gate.xml").read_text()
    cli = check_results(logger.recorder.write(tmp_path / "run.jsonl"), pol, tmp_path / "c.json")
    assert cli["status"] == "error"
    assert comparable(report) == comparable(cli)


def test_a_nan_between_logging_steps_still_stops_at_its_step(tmp_path: Path) -> None:
    """The loggers see every 50th step; the gate sees every step, ahead of them."""
    logger = RecordLogger()
    gate = GatekeeperCallback(gate_policy(tmp_path), reports=reports(tmp_path))
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_steps=60, accelerator="cpu", logger=logger, log_every_n_steps=50,
        callbacks=[Poison(at=7), gate], enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, default_root_dir=str(tmp_path), limit_val_batches=0,
    )
    trainer.fit(Regressor(), data(160, 0))
    assert trainer.global_step == 9  # async: batch 8 ran while batch 7 was judged
    assert json.loads((tmp_path / "gate.json").read_text())["stopped"]["step"] == 7


def test_report_mode_trains_on_and_raise_mode_raises(tmp_path: Path) -> None:
    from gatekeeper.inprocess import GateFailed

    reporting = GatekeeperCallback(gate_policy(tmp_path), on_fail="report",
                                   reports=reports(tmp_path))
    trainer = fit(25, [Poison(at=5), reporting], RecordLogger(), tmp_path)
    assert trainer.global_step == 25  # reported, not stopped
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["status"] == "error" and report["stopped"] is None

    raising = GatekeeperCallback(gate_policy(tmp_path), on_fail="raise",
                                 reports=reports(tmp_path / "raise"))
    with pytest.raises(GateFailed):
        fit(25, [Poison(at=5), raising], RecordLogger(), tmp_path)
    assert json.loads((tmp_path / "raise/gate.json").read_text())["stopped"]["step"] == 5


class Placement(pl.Callback):
    """Placed after the gate's callback: what its hand-over holds at each hook."""

    def __init__(self, gate: GatekeeperCallback):
        self.handoff = gate.gate._handoff
        self.held: list[tuple[str, int, int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.held.append(("batch-start", trainer.global_step, len(self.handoff._held)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.held.append(("batch-end", trainer.global_step, len(self.handoff._held)))


def test_async_sends_a_step_to_the_judge_at_the_next_batch_start(tmp_path: Path) -> None:
    """lightning 2.6 `_TrainingEpochLoop.advance`: `on_train_batch_start` runs before the
    batch's `training_step`, `on_train_batch_end` after its optimizer step. A step's
    values are held at its end (their device copy is queued behind the optimizer step)
    and sent at the next batch's start, before its forward is queued."""
    gate = GatekeeperCallback(gate_policy(tmp_path), reports=reports(tmp_path))
    placement = Placement(gate)
    fit(3, [gate, placement], RecordLogger(), tmp_path)
    assert placement.held == [
        ("batch-start", 0, 0), ("batch-end", 1, 1),  # step 1's values held at its end
        ("batch-start", 1, 0), ("batch-end", 2, 1),  # and sent as step 2 starts
        ("batch-start", 2, 0), ("batch-end", 3, 1),
    ]


def test_validate_alone_hands_its_metrics_to_the_gate(tmp_path: Path) -> None:
    """`Trainer.validate` (lightning 2.6) runs `on_validation_end` with no fit hook before
    it: the callback hands the validation metrics over all the same."""
    cb = GatekeeperCallback(str(gate_policy(tmp_path)), mode="sync", reports=reports(tmp_path))
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=[cb],
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path))
    torch.manual_seed(0)
    trainer.validate(Regressor(), data(32, 1))
    verdict = cb.finish()
    judged = {r.rule: r for r in verdict.results}
    assert judged["val-loss-finite"].status.value == "pass", judged
    learns = judged["val-loss-learns"]  # an untrained model: judged on its value, pass or not
    assert learns.status.value in ("pass", "fail") and learns.value is not None, learns
