"""The `.wandb` framing reader on a real SDK file: truncation, resume, corruption, header."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.wandb import log as wandb_log
from gatekeeper.sources.wandb.log import BLOCK_LEN, LogReader


def _log_file(wandb_dir: Path) -> Path:
    return next(Path(os.path.realpath(wandb_dir / "latest-run")).glob("*.wandb"))


def test_every_cut_yields_a_prefix_and_resuming_yields_the_rest(
    failed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wandb_log, "READ_SIZE", 4096)  # exercise buffer refills too
    data = _log_file(failed_run).read_bytes()
    assert len(data) > BLOCK_LEN  # records span blocks (FIRST/MIDDLE/LAST chunks)
    full = list(LogReader(str(_log_file(failed_run))).records())
    target = tmp_path / "run-cut.wandb"
    for cut in list(range(0, 64)) + list(range(64, len(data), 331)) + [len(data)]:
        target.write_bytes(data[:cut])
        reader = LogReader(str(target))
        head = list(reader.records())
        assert head == full[: len(head)], cut
        assert reader.offset + reader.pending_bytes == max(cut, 0) or cut < 7
        with open(target, "ab") as fh:
            fh.write(data[cut:])
        assert head + list(reader.records()) == full, cut


def test_a_damaged_record_is_an_error_naming_its_byte(failed_run: Path, tmp_path: Path) -> None:
    data = bytearray(_log_file(failed_run).read_bytes())
    data[5000] ^= 0xFF
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    with pytest.raises(RecordError, match=r"run-bad\.wandb: corrupt record at byte \d+"):
        list(LogReader(str(bad)).records())


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (b":W&B\xe1\xbe\x07", "unknown .wandb format version 7"),
        (b"LEVELDB", "not a wandb transaction log"),
    ],
)
def test_header_is_checked(
    failed_run: Path, tmp_path: Path, head: bytes, message: str
) -> None:
    data = _log_file(failed_run).read_bytes()
    other = tmp_path / "run-other.wandb"
    other.write_bytes(head + data[7:])
    with pytest.raises(RecordError, match=message):
        list(LogReader(str(other)).records())


def test_a_file_shorter_than_its_header_is_not_yet_written(tmp_path: Path) -> None:
    short = tmp_path / "run-short.wandb"
    short.write_bytes(b":W&")
    reader = LogReader(str(short))
    assert list(reader.records()) == [] and reader.offset == 0


def _frame(records: list[bytes]) -> bytes:
    """A minimal LevelDB-log writer: small records as FULL chunks in the first block."""
    import struct
    import zlib

    out = bytearray(b":W&B\xe1\xbe\x00")
    for data in records:
        crc = zlib.crc32(data, zlib.crc32(b"\x01"))
        out += struct.pack("<IHB", crc, len(data), 1) + data
    assert len(out) < BLOCK_LEN
    return bytes(out)


def test_older_files_with_flat_keys_and_no_history_step(tmp_path: Path) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    from gatekeeper.sources import open_source

    records = []
    for step in range(3):
        items = [pb.HistoryItem(key="loss", value_json=repr(1.0 / (step + 1))),
                 pb.HistoryItem(key="_step", value_json=str(step * 10))]
        records.append(pb.Record(history=pb.HistoryRecord(item=items)).SerializeToString())
    records.append(pb.Record(exit=pb.RunExitRecord(exit_code=0)).SerializeToString())
    log = tmp_path / "run-old.wandb"
    log.write_bytes(_frame(records))
    run = open_source(str(log)).read()
    loss = run.series["loss"]
    assert loss.step_key == "_step" and loss.steps.tolist() == [0, 10, 20]
    assert loss.values.tolist() == [1.0, 0.5, 1.0 / 3]
    assert run.state.value == "finished"


@pytest.mark.parametrize("kind", ["summary", "stats"])
def test_a_record_that_is_not_a_protobuf_record_is_refused_whatever_its_kind(
    tmp_path: Path, kind: str
) -> None:
    """Damage the CRC cannot see (a writer's bug, a hand-made file) inside a record that
    gatekeeper does not judge is still damage: the SDK's `Record` refuses it, and so does
    `check` (exit 2, naming the byte), rather than judging the rest of the file."""
    from wandb.proto import wandb_internal_pb2 as pb

    from gatekeeper.sources import open_source

    h = pb.HistoryRecord(item=[pb.HistoryItem(key="loss", value_json="0.5")])
    h.step.num = 0
    field = pb.Record.DESCRIPTOR.fields_by_name[kind].number
    garbage = bytes([field << 3 | 2, 4]) + b"\x0a\x05\xff\xfe"  # a length past its end
    records = [pb.Record(history=h).SerializeToString(), garbage,
               pb.Record(exit=pb.RunExitRecord(exit_code=0)).SerializeToString()]
    log = tmp_path / "run-damaged.wandb"
    log.write_bytes(_frame(records))
    with pytest.raises(RecordError, match=r"record ending at byte \d+ is not a wandb protobuf"):
        open_source(str(log)).read()
