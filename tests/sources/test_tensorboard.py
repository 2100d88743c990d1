"""TensorBoard event files written by real writers: tensorboardX 2.6 `SummaryWriter`
(`simple_value` form) and tensorboard 2.21's own `tensorboard.summary.Writer` (the rank-0
tensor form with `scalars` plugin metadata, as TF2 and torch `new_style=True` write it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources import open_live_source, open_source
from gatekeeper.sources.tensorboard import TensorBoardSource
from tests.helpers import gatekeeper, write_policy

tensorboardX = pytest.importorskip("tensorboardX")
WRITER = str(Path(__file__).with_name("tb_writer.py"))


def _write(logdir: Path, loss: list[float], *, images: bool = False) -> Path:
    w = tensorboardX.SummaryWriter(str(logdir))
    for step, value in enumerate(loss):
        w.add_scalar("train/loss", value, step)
        if images:
            w.add_image("samples", np.zeros((3, 16, 16), dtype=np.uint8), step)
            w.add_histogram("weights", np.arange(20.0), step)
    w.close()
    return next(logdir.glob("events.out.tfevents.*"))


def _policy(tmp: Path) -> Path:
    return write_policy(
        tmp / "tb.yaml",
        """
        version: 1
        name: tb
        rules:
          - id: loss-bounded
            metric: train/loss
            check: {max: 2.0}
        """,
    )


def _check(tmp: Path, source: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp / "verdict.json"
    proc = gatekeeper("check", source, "-p", str(_policy(tmp)), "--json", str(out))
    return proc, (json.loads(out.read_text()) if out.exists() else {})


def _result(verdict: dict) -> dict:
    return next(r for r in verdict["results"] if r["rule"] == "loss-bounded")


def test_every_scalar_of_both_forms_is_read_and_media_is_skipped(tmp_path: Path) -> None:
    from tensorboard.summary import Writer

    _write(tmp_path, [1.0, 0.5, 0.25], images=True)
    w = Writer(str(tmp_path))
    for step in range(3, 6):
        w.add_scalar("eval/reward", 0.1 * step, step)
    w.close()
    run = open_source(str(tmp_path)).read()
    assert isinstance(open_source(str(tmp_path)), TensorBoardSource)
    assert sorted(run.series) == ["eval/reward", "train/loss"]
    assert run.series["train/loss"].steps.tolist() == [0, 1, 2]
    assert run.series["train/loss"].values.tolist() == [1.0, 0.5, 0.25]
    assert run.series["eval/reward"].steps.tolist() == [3, 4, 5]
    np.testing.assert_allclose(run.series["eval/reward"].values, [0.3, 0.4, 0.5], rtol=1e-6)
    assert run.state.value == "unknown"  # TensorBoard carries no run state


def test_healthy_run_passes_and_broken_run_fails_at_its_step(tmp_path: Path) -> None:
    _write(tmp_path / "good", [1.0, 0.5, 0.25, 0.2])
    _write(tmp_path / "bad", [1.0, 0.5, 7.5, 0.2])
    proc, verdict = _check(tmp_path, str(tmp_path / "good"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, verdict = _check(tmp_path, f"tensorboard://{tmp_path / 'bad'}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = _result(verdict)
    assert res["status"] == "fail" and res["step"] == 2 and res["value"] == 7.5


def test_nan_is_an_error_at_its_step(tmp_path: Path) -> None:
    _write(tmp_path, [1.0, float("nan"), 0.25])
    proc, verdict = _check(tmp_path, str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = _result(verdict)
    assert res["status"] == "error" and res["step"] == 1


def test_truncated_event_file_is_an_error_naming_file_and_offset(tmp_path: Path) -> None:
    path = _write(tmp_path, [1.0, 0.5, 0.25])
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 5)
    proc, _ = _check(tmp_path, str(tmp_path))
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert str(path) in line and "truncated record" in line and "byte offset" in line
    assert len(line.splitlines()) == 1


def test_corrupt_record_is_an_error_naming_its_byte_offset(tmp_path: Path) -> None:
    path = _write(tmp_path, [1.0, 0.5, 0.25])
    data = bytearray(path.read_bytes())
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 16 + int.from_bytes(data[pos : pos + 8], "little")
    data[offsets[2] + 14] ^= 0xFF  # a byte inside the third record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=f"byte offset {offsets[2]}: corrupt record"):
        TensorBoardSource(str(tmp_path)).read()


def _reframe(data: bytes) -> bytes:
    """The records of `data` with both CRCs computed again (a record edited on purpose)."""
    from gatekeeper.sources.tensorboard.records import crc32c_function, masked

    crc, out, pos = crc32c_function(), bytearray(), 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        payload = data[pos + 12 : pos + 12 + length]
        out += data[pos : pos + 8] + masked(crc(data[pos : pos + 8])).to_bytes(4, "little")
        out += payload + masked(crc(payload)).to_bytes(4, "little")
        pos += 16 + length
    return bytes(out)


def test_a_tag_that_is_not_utf8_is_refused_alike_by_both_decoders(
    tmp_path: Path, monkeypatch
) -> None:
    """A value of 100 under `train/loss\\xff` (one byte edited in a tensorboardX record,
    CRCs made right): not another metric that passes, but exit 2 naming the file and the
    record's offset, the one answer of the fast path and of protobuf alone."""
    import gatekeeper.sources.tensorboard.events as events
    from tests.sources.test_tensorboard_restarts import no_fast_path

    w = tensorboardX.SummaryWriter(str(tmp_path))
    for step in range(5):
        w.add_scalar("train/loss", 1.0, step)
    w.add_scalar("train/lossQ", 100.0, 5)
    w.close()
    path = next(tmp_path.glob("events.out.tfevents.*"))
    raw = path.read_bytes()
    at = raw.index(b"train/lossQ")
    pos = 0
    while pos + 16 + int.from_bytes(raw[pos : pos + 8], "little") < at:
        pos += 16 + int.from_bytes(raw[pos : pos + 8], "little")
    offset = pos
    path.write_bytes(_reframe(raw.replace(b"train/lossQ", b"train/loss\xff")))

    proc, _ = _check(tmp_path, str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert str(path) in line and f"byte offset {offset}:" in line, line
    with pytest.raises(RecordError) as fast:
        TensorBoardSource(str(tmp_path)).read()
    monkeypatch.setattr(events, "simple_scalars", no_fast_path)
    with pytest.raises(RecordError) as slow:
        TensorBoardSource(str(tmp_path)).read()
    assert str(fast.value) == str(slow.value)


def test_restart_files_of_one_run_are_merged_by_step(tmp_path: Path) -> None:
    _write(tmp_path, [1.0, 0.5])
    time.sleep(1.1)  # the file name carries the writer's start second
    w = tensorboardX.SummaryWriter(str(tmp_path))
    w.add_scalar("train/loss", 0.3, 2)
    w.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    run = TensorBoardSource(str(tmp_path)).read()
    assert run.series["train/loss"].steps.tolist() == [0, 1, 2]


def test_live_poll_returns_only_new_points_and_waits_on_a_partial_record(tmp_path: Path) -> None:
    src = open_live_source(f"tb://{tmp_path / 'run'}")
    assert src.poll().points == 0  # the run has not started: nothing, no error
    path = _write(tmp_path / "run", [1.0, 0.5, 0.25])
    first = src.poll()
    assert first.series["train/loss"].steps.tolist() == [0, 1, 2]
    data = path.read_bytes()
    w = tensorboardX.SummaryWriter(str(tmp_path / "extra"))
    w.add_scalar("train/loss", 0.125, 3)
    w.close()
    record = next((tmp_path / "extra").glob("events.out.tfevents.*")).read_bytes()
    tail = record[-(len(record) - _first_record_end(record)) :]  # skip its file_version
    with open(path, "ab") as fh:
        fh.write(tail[:10])  # half a record: the writer is mid-flush
    assert src.poll().points == 0
    saved = src.cursor()
    with open(path, "ab") as fh:
        fh.write(tail[10:])
    resumed = TensorBoardSource(f"tb://{tmp_path / 'run'}")
    resumed.restore(json.loads(json.dumps(saved)))
    poll = resumed.poll()
    assert poll.series["train/loss"].steps.tolist() == [3]
    assert poll.series["train/loss"].values.tolist() == [0.125]
    assert len(data) < path.stat().st_size


def _first_record_end(data: bytes) -> int:
    return 16 + int.from_bytes(data[:8], "little")


def test_run_stops_when_a_bad_point_is_appended_to_the_growing_event_file(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    out = tmp_path / "v.json"
    proc = gatekeeper(
        "run", "-p", str(_policy(tmp_path)), "--source", f"tensorboard://{logdir}",
        "--json", str(out), "--interval", "0.1", "--progress-every", "1", "--grace", "5",
        "--", sys.executable, WRITER, str(logdir), "--steps", "400", "--delay", "0.02",
        "--bad-at", "8",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    stopped = json.loads(out.read_text())["stopped"]
    assert stopped["rule"] == "tb/loss-bounded" and stopped["step"] == 8
    assert stopped["value"] == 5.0
    files = list(logdir.glob("events.out.tfevents.*"))
    assert files and os.path.getsize(files[0]) < 400 * 100  # stopped well before the end


def test_bulk_decoder_agrees_with_protobuf_on_every_point(tmp_path: Path, monkeypatch) -> None:
    """The vectorized path for the common one-scalar event must give exactly what decoding
    each record with protobuf gives: step 0 (left out of the record), multi-byte steps,
    non-ASCII and long tags, NaN/Inf, and events it must leave to protobuf (images)."""
    import gatekeeper.sources.tensorboard.events as events
    from gatekeeper.sources.tensorboard.fastpath import Scalars

    w = tensorboardX.SummaryWriter(str(tmp_path))
    tags = ["a", "train/loss", "über/größe", "x" * 200, "y" * 300]
    for step in [0, 1, 127, 128, 300, 2**20, 2**40]:
        for k, tag in enumerate(tags):
            w.add_scalar(tag, [0.5, float("nan"), float("inf"), -1e30, 3.0][k], step)
        w.add_image("img", np.zeros((3, 4, 4), dtype=np.uint8), step)
    w.close()
    fast = TensorBoardSource(str(tmp_path)).read().series

    def nothing(data: bytes, starts: list[int], lengths: list[int]) -> Scalars:
        empty = np.empty(0, np.int64)
        return Scalars(empty, empty, np.empty(0), empty, [])

    monkeypatch.setattr(events, "simple_scalars", nothing)
    slow = TensorBoardSource(str(tmp_path)).read().series
    assert sorted(fast) == sorted(slow) == sorted(tags)
    for tag in tags:
        assert fast[tag].steps.tolist() == slow[tag].steps.tolist()
        np.testing.assert_array_equal(fast[tag].values, slow[tag].values)
    assert fast["a"].steps.tolist() == [0, 1, 127, 128, 300, 2**20, 2**40]


def test_annotate_writes_the_verdict_into_the_run_directory(tmp_path: Path) -> None:
    _write(tmp_path / "run", [1.0, 9.0])
    proc = gatekeeper("check", f"tb://{tmp_path / 'run'}", "-p", str(_policy(tmp_path)),
                      "--annotate")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    written = json.loads((tmp_path / "run" / "gatekeeper-verdict.json").read_text())
    assert written["tag"] == "gate:fail"


def test_reading_in_small_chunks_gives_the_same_run(tmp_path: Path, monkeypatch) -> None:
    import gatekeeper.sources.tensorboard.source as source

    _write(tmp_path / "a", [float(i) for i in range(300)], images=True)
    # a second file (a restart): record numbers continue across files; the suffix keeps
    # it apart from the first, which may share its start second
    w = tensorboardX.SummaryWriter(str(tmp_path / "a"), filename_suffix=".restart")
    w.add_scalar("train/loss", 1.0, 0)
    w.close()
    assert len(list((tmp_path / "a").glob("events.out.tfevents.*"))) == 2
    whole = TensorBoardSource(str(tmp_path / "a")).read().series
    monkeypatch.setattr(source, "READ_CHUNK", 700)  # smaller than one image record
    chunked = TensorBoardSource(str(tmp_path / "a")).read().series
    assert sorted(whole) == sorted(chunked) == ["train/loss"]
    assert whole["train/loss"].steps.tolist() == chunked["train/loss"].steps.tolist()
    assert whole["train/loss"].values.tolist() == chunked["train/loss"].values.tolist()
    assert len(whole["train/loss"]) == 301


def test_torch_writer_both_scalar_forms_nan_at_its_step(tmp_path: Path) -> None:
    """`torch.utils.tensorboard.SummaryWriter` (torch 2.13.0 CPU, installed by the test
    command): the legacy `simple_value` form and `new_style=True` (the tensor-summary form),
    a NaN an error at its own step, a breach failing at its step."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    w = torch_tb.SummaryWriter(str(tmp_path / "run"))
    for step, value in enumerate([1.0, 0.5, float("nan"), 0.25]):
        w.add_scalar("train/loss", value, step)
        w.add_scalar("train/kl", 0.1 * step, step, new_style=True)
    w.close()
    run = open_source(str(tmp_path / "run")).read()
    assert run.series["train/loss"].steps.tolist() == [0, 1, 2, 3]
    assert np.isnan(run.series["train/loss"].values[2])
    assert run.series["train/kl"].steps.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(run.series["train/kl"].values, [0.0, 0.1, 0.2, 0.3], rtol=1e-6)
    proc, verdict = _check(tmp_path, str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = _result(verdict)
    assert res["status"] == "error" and res["step"] == 2, res
