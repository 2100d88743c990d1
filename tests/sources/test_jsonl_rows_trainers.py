"""The JSONL reader on rows that real trainers produced, not generated shapes.

`test_jsonl_reader.py` compares the reader with a plain `json.loads` reading on seeded
files shaped like trainer logs. Here the rows come from the trainers themselves, written
the way a user's own logger writes them (`json.dumps` of each row, one per line, so a NaN
loss is the `NaN` token Python's json emits):

- transformers 5.24 `Trainer.state.log_history` (train rows with `loss`, `grad_norm`,
  `learning_rate`, `epoch`; eval rows with `eval_loss`, `eval_runtime`, ...; the final
  `train_runtime`/`train_loss` summary row), from a tiny GPT-2 on CPU, healthy and with
  its weights turned NaN mid-run;
- lightning 2.6: what `Logger.log_metrics(metrics, step)` receives (train rows each step,
  `val_loss` rows at validation, `epoch` in every row), from a small MLP on CPU.

Each file is read at several block sizes, and must give the same points, axes and end
markers as the reference reading (`tests/sources/jsonl_reference.py`). Then
`gatekeeper check` judges the file in a child process: the healthy run passes, the NaN
run is an ERROR at the poisoned step (a NaN is never judged as a value).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import gatekeeper, write_policy
from tests.sources.test_jsonl_reader import _agrees

torch = pytest.importorskip("torch")

BLOCKS = (64, 700, 8 << 20)


def _write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")  # NaN/Infinity as Python's json writes them
    return path


def _judge(path: Path, tmp: Path, metric: str) -> dict[str, Any]:
    pol = write_policy(tmp / "rows-policy.yaml", f"""
        version: 1
        name: trainer-rows
        rules:
          - id: loss-finite
            metric: {metric}
            check: {{finite: true}}
    """)
    out = tmp / "rows.json"
    proc = gatekeeper("check", str(path), "-p", str(pol), "--json", str(out), "-q")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("poison_at", [None, 12])
def test_hf_trainer_log_history_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     poison_at: int | None) -> None:
    pytest.importorskip("transformers")
    from tests.integrations.test_hf import Poison, train

    trainer = train(tmp_path, 24, [Poison(poison_at)] if poison_at else [])
    history = trainer.state.log_history
    assert {"loss", "grad_norm", "learning_rate", "epoch", "step"} <= set(history[0])
    assert any("eval_loss" in row for row in history)
    path = _write_rows(history, tmp_path / "log_history.jsonl")
    if poison_at:
        assert b"NaN" in path.read_bytes()

    assert _agrees(path, monkeypatch, BLOCKS) == "ok"

    report = _judge(path, tmp_path, "loss")
    (result,) = report["results"]
    if poison_at is None:
        assert report["status"] == "pass"
        assert result["judged"] == 24
    else:
        assert report["status"] == result["status"] == "error"  # a NaN is an ERROR, not a pass
        assert result["step"] == poison_at, result


def _rows_logger(path: Path) -> Any:
    """A Lightning Logger (the trainer test's, names and all) that writes each
    `log_metrics` call as one row when the run ends."""
    from tests.integrations.test_lightning import RecordLogger

    class RowsLogger(RecordLogger):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[dict[str, Any]] = []

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.rows.append({"step": step, **{k: float(v) for k, v in metrics.items()}})

        def finalize(self, status: str) -> None:
            _write_rows(self.rows, path)

    return RowsLogger()


@pytest.mark.parametrize("poison_at", [None, 7])
def test_lightning_logged_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               poison_at: int | None) -> None:
    pytest.importorskip("lightning.pytorch")
    from tests.integrations.test_lightning import Poison, fit

    path = tmp_path / "lightning.jsonl"
    fit(24, [Poison(poison_at)] if poison_at else [], _rows_logger(path), tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert any("val_loss" in row for row in rows) and any("train_loss" in row for row in rows)

    assert _agrees(path, monkeypatch, BLOCKS) == "ok"

    report = _judge(path, tmp_path, "train_loss")
    (result,) = report["results"]
    if poison_at is None:
        assert report["status"] == "pass"
    else:
        assert report["status"] == result["status"] == "error"  # a NaN is an ERROR, not a pass
        assert result["step"] == poison_at, result
