"""The JSONL rows fast paths on rows that real trainers produced, not generated shapes.

`test_jsonl_rows_fast.py` compares the fast ways through a block with the whole-block
path on seeded files shaped like trainer logs. Here the rows come from the trainers
themselves, written the way a user's own logger writes them (`json.dumps` of each row,
one per line, so a NaN loss is the `NaN` token Python's json emits):

- transformers 5.24 `Trainer.state.log_history` (train rows with `loss`, `grad_norm`,
  `learning_rate`, `epoch`; eval rows with `eval_loss`, `eval_runtime`, ...; the final
  `train_runtime`/`train_loss` summary row), from a tiny GPT-2 on CPU, healthy and with
  its weights turned NaN mid-run;
- lightning 2.6: what `Logger.log_metrics(metrics, step)` receives (train rows each step,
  `val_loss` rows at validation, `epoch` in every row), from a small MLP on CPU.

Each file is read with the fast paths on and off, at several block sizes: columns bit
for bit, axes, errors and line counts must be equal, and the fast path must have taken
the rows (a comparison where both sides ran the slow path would prove nothing). Then
`gatekeeper check` judges the file in a child process: the healthy run passes, the NaN
run is an ERROR at the poisoned step (a NaN is never judged as a value).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.sources.jsonl import reader
from gatekeeper.sources.jsonl.reader import JsonlParser
from tests.helpers import gatekeeper, write_policy
from tests.sources.test_jsonl_rows_fast import _same

torch = pytest.importorskip("torch")

@pytest.fixture(autouse=True)
def _python_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the Python ways through a block: the C rows reader, which
    would take uniform blocks first, is off (tests/sources/test_jsonl_rows_c.py compares
    it with them)."""
    monkeypatch.setattr(reader, "USE_C", False)


BLOCKS = [64, 700, 8 << 20]


def _write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")  # NaN/Infinity as Python's json writes them
    return path


def _fast_paths_taken(path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many blocks one of the row fast paths accepted (default block size)."""
    taken = 0
    for name in ("_uniform_rows", "_grouped_rows"):
        original = getattr(JsonlParser, name)

        def spy(self: Any, *args: Any, _original: Any = original) -> Any:
            nonlocal taken
            done = _original(self, *args)  # None: "another key order", not False
            taken += done is True
            return done

        monkeypatch.setattr(JsonlParser, name, spy)
    from gatekeeper.sources.jsonl.reader import parse_file

    parse_file(JsonlParser(str(path)), final=True)
    monkeypatch.undo()
    return taken


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


def _assert_fast_equals_exact(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for block in BLOCKS:
        outcome = _same(path, block, monkeypatch)
        assert outcome[0] == "ok", outcome
    assert _fast_paths_taken(path, monkeypatch) > 0, "no block took a rows fast path"
    _assert_c_equals_python(path, monkeypatch)


def _assert_c_equals_python(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C rows reader (when built) on the same real rows: the same columns, axes and
    line counts as the Python ways, at every block size, and it did read blocks (those
    with a bare NaN token, as json.dumps writes a NaN loss, it leaves to Python)."""
    if reader._c_module() is None:
        return  # not built here: test_jsonl_rows_c.py is skipped with the reason
    from tests.sources.test_jsonl_rows_c import _same as same_c

    poisoned = b"NaN" in path.read_bytes()  # a bare NaN token: its block is Python's
    for block in BLOCKS:
        (kind, *_), taken = same_c(path, block, monkeypatch)
        assert kind == "ok"
        assert any(taken) or poisoned, "the C reader read no block"
        if not poisoned:
            assert all(taken), "the C reader declined a block of plain rows"


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

    _assert_fast_equals_exact(path, monkeypatch)

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

    _assert_fast_equals_exact(path, monkeypatch)

    report = _judge(path, tmp_path, "train_loss")
    (result,) = report["results"]
    if poison_at is None:
        assert report["status"] == "pass"
    else:
        assert report["status"] == result["status"] == "error"  # a NaN is an ERROR, not a pass
        assert result["step"] == poison_at, result
