"""LiveJsonlSource on real files: appended, atomically rewritten (by a real child
process, as miles does), per-process files in a directory, not there yet, half-written
lines, the end marker, and a cursor that survives a JSON round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from gatekeeper.sources import open_live_source
from gatekeeper.sources.jsonl.live import LiveJsonlSource
from tests.helpers import write_record

WRITER = Path(__file__).with_name("writer.py")


def _row(step: int, kl: float = 0.0) -> bytes:
    return json.dumps({"train/step": step, "train/ppo_kl": kl}).encode() + b"\n"


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def _steps(poll, metric: str = "train/ppo_kl") -> list[int]:
    s = poll.series.get(metric)
    return [] if s is None else s.steps.tolist()


def test_missing_source_waits_then_is_read_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "later" / "m.jsonl"
    src = open_live_source(str(path))
    assert isinstance(src, LiveJsonlSource)
    first = src.poll()
    assert (first.points, first.ended, first.series) == (0, False, {})
    path.parent.mkdir()
    path.write_bytes(_row(0) + _row(1))
    assert _steps(src.poll()) == [0, 1]


def test_appended_file_yields_only_new_points_and_waits_for_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(_row(0) + _row(1))
    src = LiveJsonlSource(str(path))
    assert _steps(src.poll()) == [0, 1]
    assert src.poll().points == 0
    line = _row(2, 0.25)
    _append(path, line[:9])  # the writer is mid-line
    half = src.poll()
    assert half.points == 0 and not half.ended
    _append(path, line[9:] + _row(3))
    poll = src.poll()
    assert _steps(poll) == [2, 3]
    assert poll.series["train/ppo_kl"].values.tolist() == [0.25, 0.0]
    assert src.cursor()["files"][str(path)]["offset"] == path.stat().st_size


def test_signature_kept_from_the_bytes_read_is_the_files_own(tmp_path: Path) -> None:
    """A poll takes the signature of the bytes before its offset from the lines it has
    just read (no re-read); it must equal those bytes in the file, whatever the sizes."""
    path = tmp_path / "m.jsonl"
    src = LiveJsonlSource(str(path))
    sizes = [b'{"step": 0, "x": 1}\n', _row(1) * 3, b"", b'{"step": 9, "x": 2}\n', _row(10)]
    for chunk in sizes:
        _append(path, chunk)
        src.poll()
        tail = src.cursor()["files"][str(path)]
        data = path.read_bytes()[: tail["offset"]]
        assert tail["offset"] == path.stat().st_size
        assert tail["sig"] == data[-64:].hex()
    _append(path, _row(11)[:5])  # a partial line: not read, the signature stays
    src.poll()
    tail = src.cursor()["files"][str(path)]
    assert tail["sig"] == path.read_bytes()[: tail["offset"]][-64:].hex()


def test_rewritten_record_emits_only_points_not_seen_yet(tmp_path: Path) -> None:
    """A real child rewrites the record by temp file + rename after every step (miles);
    whatever the interleaving with our polls, every step arrives exactly once."""
    out = tmp_path / "rec"
    src = LiveJsonlSource(str(out))
    child = subprocess.Popen(
        [
            sys.executable,
            str(WRITER),
            str(out),
            "--miles",
            "--steps",
            "40",
            "--delay",
            "0.005",
            "--end",
        ]
    )
    seen: list[int] = []
    ended = exited = False
    while not (ended or exited):
        # whether the child had exited is known before the poll, so the poll after its
        # exit reads everything it wrote, end marker included, and that poll's `ended`
        # is the one asserted (was: polled once more after the exit, `ended` dropped)
        exited = child.poll() is not None
        poll = src.poll()
        seen += _steps(poll)
        ended = poll.ended
    assert child.wait() == 0
    assert seen == list(range(40))
    assert ended, "the end marker in the rewritten file ends the run"
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_rewrite_with_same_size_and_inode_is_detected_by_content(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    write_record(path, {"train/ppo_kl": [(0, 0.5), (1, 0.5)]})
    src = LiveJsonlSource(str(path))
    assert _steps(src.poll()) == [0, 1]
    # Rewritten in place (same inode), one point more: the old offset no longer fits.
    write_record(path, {"train/ppo_kl": [(0, 0.5), (1, 0.5), (2, 0.7)]})
    poll = src.poll()
    assert _steps(poll) == [2]
    assert poll.series["train/ppo_kl"].values.tolist() == [0.7]


def test_directory_picks_up_per_process_files_as_they_appear(tmp_path: Path) -> None:
    src = LiveJsonlSource(str(tmp_path))
    assert src.poll().points == 0
    (tmp_path / "rank0.jsonl").write_bytes(_row(0))
    assert _steps(src.poll()) == [0]
    (tmp_path / ".rank1.jsonl.tmp").write_bytes(b"{half")  # a writer's temp file: ignored
    (tmp_path / "rank1.jsonl").write_bytes(
        json.dumps({"rollout/step": 0, "rollout/raw_reward": 0.4}).encode() + b"\n"
    )
    _append(tmp_path / "rank0.jsonl", _row(1))
    poll = src.poll()
    assert _steps(poll) == [1]
    assert poll.series["rollout/raw_reward"].steps.tolist() == [0]
    assert poll.series["rollout/raw_reward"].step_key == "rollout/step"


def test_path_is_looked_at_once_a_poll_whatever_it_turns_out_to_be(tmp_path: Path) -> None:
    """One stat of the watched path a poll tells it all: not there yet (nothing, its
    sidecar looked up as a file's), a directory made since (its files read, its
    `run.json` named), a FIFO (refused, never read: it would hang the poll)."""
    import pytest

    from gatekeeper.errors import SourceError

    path = tmp_path / "run"
    src = LiveJsonlSource(str(path))
    assert src.poll().points == 0 and not src._is_dir
    path.mkdir()
    (path / "rank0.jsonl").write_bytes(_row(0))
    (path / "run.json").write_text(json.dumps({"name": "named-by-sidecar"}))
    poll = src.poll()
    assert _steps(poll) == [0] and src._is_dir and poll.run.name == "named-by-sidecar"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="not a regular file or directory"):
        LiveJsonlSource(str(fifo)).poll()


def test_run_ends_when_every_file_wrote_its_end_marker(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(_row(0) + b'{"event": "end", "state": "finished"}\n')
    b.write_bytes(_row(1))
    src = LiveJsonlSource(str(tmp_path))
    assert not src.poll().ended
    _append(b, b'{"event": "end", "state": "failed"}\n')
    poll = src.poll()
    assert poll.ended and poll.run.state.value == "failed"


def test_cursor_round_trips_through_json_and_resumes_without_rereading(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"".join(_row(i) for i in range(5)))
    first = LiveJsonlSource(str(path))
    first.poll()
    saved = json.loads(json.dumps(first.cursor()))
    _append(path, _row(5) + _row(6))
    resumed = LiveJsonlSource(str(path))
    resumed.restore(saved)
    assert _steps(resumed.poll()) == [5, 6]
    assert np.array_equal(resumed.read().series["train/ppo_kl"].steps, np.arange(7))
