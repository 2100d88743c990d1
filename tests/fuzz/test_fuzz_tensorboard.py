"""Seeded fuzzing of TensorBoard event files: random tags (non-UTF-8 bytes included),
restarts (`file_version` new, old or absent, `SessionLog.START`, steps going back),
damaged bytes, cut files.

Every case gets the promise of harness.py (a verdict, or exit 2 in one line naming the
file; never exit 70, never slower than TIME_BOUND), and more: a well-formed run's exit
code is the one tensorboard 2.21's `EventAccumulator` predicts from the points it keeps
(no silent pass: 0 only when every kept `loss` point is finite and within bounds); the
fast path and protobuf alone give the same points or the same error; the live source
polled while the files grow ends on the points of the whole read.
"""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.tensorboard import TensorBoardSource
from tests.fuzz.gen import Case
from tests.fuzz.harness import check_outcome, run_cli, seeds

pytest.importorskip("tensorboard")

POLICY = """version: 1
name: fuzz-tb
rules:
  - id: loss-bounded
    metric: loss
    check: {max: 100}
"""
BAD_TAGS = [b"loss\xff", b"lo\xc3", b"\xed\xa0\x80", b"\xc0\x80", b"loss\xf4\x90\x80\x80"]
GOOD_TAGS = [b"loss", b"loss", b"loss", b"kl", "lösß/ü".encode(), b"loss\x00", b"x" * 300]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 on the wire: a negative step takes ten bytes
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _scalars(step: int, values: list[tuple[bytes, float]]) -> bytes:
    """An Event of simple values, bytes written by hand so a tag can be any bytes; one
    value is the writers' own layout (the fast path's)."""
    summary = b"".join(
        _field(1, _field(1, tag) + b"\x15" + struct.pack("<f", value)) for tag, value in values
    )
    head = b"\x09" + struct.pack("<d", 1.0) + (b"\x10" + _varint(step) if step else b"")
    return head + _field(5, summary)


def _other(step: int, *, version: str | None = None, start: bool = False) -> bytes:
    from tensorboard.compat.proto import event_pb2

    event = event_pb2.Event(wall_time=1.0, step=step)
    if version is not None:
        event.file_version = version
    elif start:
        event.session_log.status = event_pb2.SessionLog.START
    return event.SerializeToString()


def _frame(payloads: list[bytes]) -> bytes:
    from gatekeeper.sources.tensorboard.records import crc32c_function, masked

    crc, out = crc32c_function(), bytearray()
    for p in payloads:
        header = struct.pack("<Q", len(p))
        out += header + struct.pack("<I", masked(crc(header)))
        out += p + struct.pack("<I", masked(crc(p)))
    return bytes(out)


def _value(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([math.nan, math.inf, -math.inf])
    return 1000.0 if roll < 0.1 else float(rng.randint(0, 99))


def _events(rng: random.Random, bad_tag: bool) -> list[bytes]:
    events = []
    version = rng.choice(["brain.Event:2", "brain.Event:2", "brain.Event:1", "junk", None])
    if version is not None:
        events.append(_other(0, version=version))
    step = rng.randint(0, 30)
    for _ in range(rng.randint(1, 30)):
        roll = rng.random()
        if roll < 0.07:
            events.append(_other(rng.randint(0, 40), start=True))
            continue
        step = rng.randint(0, step) if roll < 0.15 else step + rng.randint(0, 4)
        tags = [rng.choice(GOOD_TAGS) for _ in range(rng.choice([1, 1, 1, 2]))]
        events.append(_scalars(step, [(t, _value(rng)) for t in tags]))
    if bad_tag:
        k = rng.randrange(len(events) + 1)
        tags = [rng.choice(BAD_TAGS)] + [b"loss"] * rng.randint(0, 1)
        events.insert(k, _scalars(rng.randint(0, 50), [(t, 1.0) for t in tags]))
    return events


def _case(seed: int) -> tuple[list[bytes], int | None, str]:
    """The files' bytes, the file an error must name (None: well formed), and a label."""
    rng = random.Random(seed)
    kind = rng.choice(["ok", "ok", "ok", "tag", "damage", "cut"])
    files = [_events(rng, False) for _ in range(rng.randint(1, 3))]
    bad = rng.randrange(len(files))
    if kind == "tag":
        files[bad] = _events(rng, True)
    data = [_frame(f) for f in files]
    if kind == "damage":
        raw = bytearray(data[bad])
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        data[bad] = bytes(raw)
    elif kind == "cut":
        ends = set(np.cumsum([16 + len(p) for p in files[bad]]).tolist())
        cut = rng.randrange(1, len(data[bad]))
        data[bad] = data[bad][:cut]
        if cut in ends:
            return data, None, "cut at a record's end"
    return data, (None if kind == "ok" else bad), kind


def _paths(run: Path, n: int) -> list[Path]:
    return [run / f"events.out.tfevents.1700000000.fuzz.{k}" for k in range(n)]


def _pairs(series: Any) -> list[tuple[int, str]]:
    """(step, value) with the value's repr, so NaN equals NaN."""
    return [(s, repr(v)) for s, v in zip(series.steps.tolist(), series.values.tolist(),
                                          strict=True)]


def _points(source: TensorBoardSource) -> dict[str, list[tuple[int, str]]] | str:
    try:
        series = source.read().series
    except RecordError as exc:
        return str(exc)
    return {t: _pairs(s) for t, s in series.items()}


def _no_fast_path(data: bytes, starts: list[int], lengths: list[int]) -> Any:
    from gatekeeper.sources.tensorboard.fastpath import Scalars

    empty = np.empty(0, np.int64)
    return Scalars(empty, empty, np.empty(0), empty, [])


def _expected_exit(run: Path) -> int:
    """The verdict EventAccumulator's points call for: pass only on kept `loss` points,
    every one finite and <= 100."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(run), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    if "loss" not in acc.Tags()["scalars"]:
        return 1
    values = [e.value for e in acc.Scalars("loss")]
    healthy = values and all(math.isfinite(v) and v <= 100 for v in values)
    return 0 if healthy else 1


def _live(run: Path, data: list[bytes], rng: random.Random) -> dict[str, list[tuple[int, str]]]:
    """Grow the files in random byte steps (records cut mid-way too), polling between."""
    for p in run.iterdir():
        p.unlink()
    source = TensorBoardSource(f"tensorboard://{run}")
    written = [0] * len(data)
    got: dict[str, list[tuple[int, str]]] = {}
    paths = _paths(run, len(data))
    while written != [len(d) for d in data]:
        k = rng.choice([i for i, d in enumerate(data) if written[i] < len(d)])
        end = min(len(data[k]), written[k] + rng.randint(1, 400))
        with open(paths[k], "ab") as fh:
            fh.write(data[k][written[k] : end])
        written[k] = end
        poll = source.poll()
        if poll.reset:
            got = {}
        for tag, s in poll.series.items():
            got.setdefault(tag, []).extend(_pairs(s))
    return got


def test_event_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gatekeeper.sources.tensorboard.events as events

    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    outcomes: dict[str, int] = {}
    for seed in seeds(150):
        data, bad, label = _case(seed)
        run = tmp_path / f"run-{seed}"
        run.mkdir()
        paths = _paths(run, len(data))
        for path, raw in zip(paths, data, strict=True):
            path.write_bytes(raw)
        rc, _, err, seconds = run_cli(["check", str(run), "-p", str(policy), "-q"])
        where = f"seed {seed} ({label})"
        case = Case(where, b"", None if bad is None else {0})
        check_outcome(case, paths[bad if bad is not None else 0], rc, err, seconds)
        outcomes[label] = outcomes.get(label, 0) + 1

        fast = _points(TensorBoardSource(str(run)))
        with monkeypatch.context() as m:
            m.setattr(events, "simple_scalars", _no_fast_path)
            assert _points(TensorBoardSource(str(run))) == fast, where
        if bad is None:
            assert rc == _expected_exit(run), f"{where}: exit {rc}: {err}"
            assert isinstance(fast, dict)
            live = _live(run, data, random.Random(seed))
            assert {t: sorted(p) for t, p in live.items()} == {
                t: sorted(p) for t, p in fast.items()
            }, where
    assert outcomes.get("ok", 0) > 30 and outcomes.get("tag", 0) > 10  # both kinds exercised
