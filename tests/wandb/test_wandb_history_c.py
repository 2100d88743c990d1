"""The C history decoder (`gatekeeper/sources/wandb/_history.c`) against the Python path.

Every test reads the same bytes twice, with `decode.USE_C` on and off, and requires the
same result to the bit (steps, key order, row indices, float64 bits, masks, metadata
records) or the same error message. Inputs: runs the real SDK wrote offline (wandb 0.31,
wandb-core: NaN, ±Inf, None, nested dicts, strings, define_metric axes), crafted records
of every value form and field shape the decoder must hand back, and records mutated at
random (flipped, cut, inserted bytes) or made of random bytes. tests/test_extensions_built.py
requires the extension to be built, and used, wherever a C compiler is present, so CI
cannot pass on the slow path unnoticed.
"""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.wandb import decode as wandb_decode
from gatekeeper.sources.wandb.log import BLOCK_LEN, HEADER_LEN, LogReader
from tests.wandb.conftest import sdk_env

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
_history = pytest.importorskip("gatekeeper.sources.wandb._history")


def frame(records: list[bytes]) -> bytes:
    """A `.wandb` file of `records`, framed as the SDK frames them (FULL chunks, or FIRST
    .. LAST across 32 KiB blocks, zero padding at a block tail)."""
    out = bytearray(b":W&B\xe1\xbe\x00")
    for data in records:
        first = True
        while True:
            left = BLOCK_LEN - len(out) % BLOCK_LEN
            if left < HEADER_LEN:
                out += b"\0" * left
                continue
            take = min(len(data), left - HEADER_LEN)
            chunk, data = data[:take], data[take:]
            kind = (1 if not data else 2) if first else (4 if not data else 3)
            crc = zlib.crc32(chunk, zlib.crc32(bytes([kind])))
            out += struct.pack("<IHB", crc, len(chunk), kind) + chunk
            first = False
            if not data:
                break
    return bytes(out)


def read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """decode_range of the whole file with the C decoder and without: Part or error text."""
    out = []
    for use_c in (True, False):
        monkeypatch.setattr(wandb_decode, "USE_C", use_c)
        try:
            part = wandb_decode.decode_range(str(path), 0, None, False)
        except RecordError as exc:
            out.append(("error", str(exc)))
        else:
            out.append(part)
    monkeypatch.setattr(wandb_decode, "USE_C", True)
    return out[0], out[1]


def assert_same(fast: Any, slow: Any, what: str = "") -> None:
    if isinstance(slow, tuple) or isinstance(fast, tuple):
        assert fast == slow, what
        return
    assert fast.steps == slow.steps, what
    assert list(fast.keys) == list(slow.keys), what  # same keys in the same order
    for key, (rows, values, mask) in slow.keys.items():
        f_rows, f_values, f_mask = fast.keys[key]
        assert f_rows.dtype == rows.dtype == np.int64, (what, key)
        assert f_values.dtype == values.dtype == np.float64, (what, key)
        np.testing.assert_array_equal(f_rows, rows, err_msg=f"{what} {key}")
        assert f_values.view(np.uint64).tolist() == values.view(np.uint64).tolist(), (what, key)
        assert (f_mask is None) == (mask is None), (what, key)
        if mask is not None:
            assert f_mask.tolist() == mask.tolist(), (what, key)
    assert [m.SerializeToString() for m in fast.meta] == [
        m.SerializeToString() for m in slow.meta
    ], what
    assert (fast.end, fast.pending) == (slow.end, slow.pending), what


# ---- runs the SDK wrote ---------------------------------------------------------------

VALUES_SCRIPT = r"""
import math, sys, wandb
run = wandb.init(project="gk-c", mode="offline")
run.define_metric("train/step")
run.define_metric("train/*", step_metric="train/step")
for i in range(int(sys.argv[1])):
    row = {
        "train/step": i, "train/loss": 1.0 / (i + 1), "int": i * 7 - 50, "zero": 0,
        "negzero": -0.0, "huge": 1e300 * i, "big": 2**52 + i,
        "grad": [math.nan, math.inf, -math.inf, 0.5][i % 4],
        "maybe": None if i % 5 == 0 else i / 3, "one": {"x": i}, "_private": i,
    }
    if i % 3 == 0:
        row["sparse"] = math.sin(i)
    if i % 50 == 7:  # rows the C decoder hands back, so batches are read by both paths
        row |= {"text": "ok", "flag": True, "tiny": 1e-310, "big": 2**62,
                "nest": {"a": {"b": i * 0.25}, "c": -i}}
    elif i % 50 == 8:
        row |= {"text": i * 1.5, "flag": 1, "tiny": 0.0, "nest": {"a": {"b": 1}, "c": 2}}
    run.log(row)
run.finish()
"""


@pytest.fixture(scope="module")
def value_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2500-row run with every value form the SDK writes (two flush batches)."""
    root = tmp_path_factory.mktemp("values")
    proc = subprocess.run(
        [sys.executable, "-c", VALUES_SCRIPT, "2500"], env=sdk_env(root), cwd=root,
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(root.glob("wandb/offline-run-*/*.wandb"))


def test_sdk_written_runs_read_alike(
    value_run: Path, miles_run: Path, failed_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [value_run, *miles_run.glob("*run-*/*.wandb"), *failed_run.glob("*run-*/*.wandb")]
    assert len(files) == 3
    for path in files:
        fast, slow = read_both(path, monkeypatch)
        assert_same(fast, slow, str(path))
    decoder = wandb_decode.c_decoder()
    for raw in LogReader(str(value_run)).records():
        decoder.add(raw, 0)
    stats = decoder.stats()
    # 1 row in 50 is handed back (a string, a subnormal, an integer beyond int64)
    assert stats["decoded"] == 2450, stats


def test_forked_ranges_with_the_c_decoder(miles_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Block-aligned ranges (records cut across them) decoded in C, joined: one pass."""
    path = str(next(miles_run.glob("*run-*/*.wandb")))
    whole = wandb_decode.decode_range(path, 0, None, False)
    size = os.path.getsize(path)
    parts = [wandb_decode.decode_range(path, lo, hi, i > 0) for i, (lo, hi) in
             enumerate(wandb_decode._bounds(0, size, 5))]
    joined = wandb_decode.join(parts)
    monkeypatch.setattr(wandb_decode, "USE_C", False)
    slow = wandb_decode.decode_range(path, 0, None, False)
    assert_same(whole, slow)
    assert joined.steps == slow.steps and list(joined.keys) == list(slow.keys)
    for key, (rows, values, _) in slow.keys.items():
        np.testing.assert_array_equal(joined.keys[key][0], rows)
        np.testing.assert_array_equal(joined.keys[key][1], values)


# ---- crafted records ------------------------------------------------------------------

TEXTS = [
    "1.5", "0", "-0", "-0.0", "0.0", "3", "-7", "1e3", "1E-3", "2.5e+10", "NaN", "Infinity",
    "-Infinity", "null", '"str"', "1e400", "-1e400", "1e-400", "5e-324", "2.2250738585072014e-308",
    "123456789012345678", "1234567890123456789", "12345678901234567890123", "1,2", " 1", "1 ",
    "{}", "[1]", "true", "false", "", "01", "1.", ".5", "+1", "-", "nan", "inf", "-NaN",
    "0.1000000000000000055511151231257827", "9007199254740993", "1" * 41, "\u00e9",
]


def item(rng: random.Random, key: str | None = None) -> Any:
    key = key if key is not None else rng.choice(["a", "b", "c", "_step", "_x", "d.e", ""])
    shape = rng.random()
    it = pb.HistoryItem()
    if shape < 0.1:
        it.nested_key.extend([key, "z"])
    elif shape < 0.2:
        it.nested_key.append(key)
        if rng.random() < 0.5:
            it.key = "ignored"
    else:
        it.key = key
    typed = rng.random()
    if typed < 0.04:
        it.integer = rng.randint(-5, 5)
    elif typed < 0.08:
        it.number = rng.choice([0.5, math.nan, -0.0])
    elif typed < 0.1:
        it.boolean = True
    else:
        # mostly plain numbers: a batch read by both paths, as in a real run
        plain = ["1.5", "2", "-3.25", "NaN", "null", "0.1"]
        it.value_json = rng.choice(plain if rng.random() < 0.8 else TEXTS)
    return it


def history(rng: random.Random, step: int | None) -> bytes:
    h = pb.HistoryRecord(item=[item(rng) for _ in range(rng.randint(0, 6))])
    if step is not None:
        h.step.num = step
    return pb.Record(num=rng.randint(0, 9), history=h).SerializeToString()


def test_crafted_value_forms_and_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(14)
    for case in range(60):
        records = []
        for i in range(rng.randint(1, 300)):
            r = rng.random()
            if r < 0.02:
                records.append(history(rng, None))  # stepless: the Python path's `_step`
            elif r < 0.04:
                records.append(pb.Record(exit=pb.RunExitRecord(exit_code=1)).SerializeToString())
            elif r < 0.06:
                records.append(pb.Record(summary=pb.SummaryRecord()).SerializeToString())
            else:
                records.append(history(rng, rng.choice([i, i, i, -i, 2**53, 2**53 + 1])))
        path = tmp_path / f"crafted-{case}.wandb"
        path.write_bytes(frame(records))
        monkeypatch.setattr(wandb_decode, "FLUSH_ROWS", rng.choice([1, 3, 64, 2048]))
        fast, slow = read_both(path, monkeypatch)
        assert_same(fast, slow, f"case {case}")


def test_hand_back_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shapes protobuf merges or reads differently are handed back, never guessed."""
    it = pb.HistoryItem(key="a", value_json="1.5").SerializeToString()
    step = pb.HistoryStep(num=3).SerializeToString()

    def field(no: int, payload: bytes) -> bytes:
        return bytes([no << 3 | 2, len(payload)]) + payload

    hist_twice = field(2, field(1, it) + field(2, step)) * 2
    step_twice = field(2, field(1, it) + field(2, step) + field(2, pb.HistoryStep(num=4)
                                                            .SerializeToString()))
    key_twice = field(2, field(1, it + field(1, b"b")) + field(2, step))
    value_twice = field(2, field(1, it + bytes([16 << 3 | 2, 1]) + b"7") + field(2, step))
    bad_utf8 = field(2, field(1, field(1, b"\xed\xa0\x80") + field(16, b"1")) + field(2, step))
    bad_utf8_value = field(2, field(1, field(1, b"k") + bytes([16 << 3 | 2, 1, 0xff]))
                           + field(2, step))
    run_after = field(2, field(1, it) + field(2, step)) + field(17, b"")
    group = field(2, field(1, it) + field(2, step) + bytes([9 << 3 | 3, 9 << 3 | 4]))
    records = [hist_twice, step_twice, key_twice, value_twice, bad_utf8, bad_utf8_value,
               run_after, group]
    decoder = wandb_decode.c_decoder()
    for raw in records:
        assert decoder.add(raw, 0) is None, raw
    assert decoder.add(field(2, field(1, it) + field(2, step)), 0) == 3.0
    for i, raw in enumerate(records):
        path = tmp_path / f"shape-{i}.wandb"
        path.write_bytes(frame([field(2, field(1, it) + field(2, step)), raw]))
        fast, slow = read_both(path, monkeypatch)
        assert_same(fast, slow, f"shape {i}")


# ---- hostile bytes --------------------------------------------------------------------


def mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.4 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.6 and b:
            del b[rng.randrange(len(b)):]
        elif op < 0.8:
            at = rng.randrange(len(b) + 1)
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        elif b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def test_fuzzed_records_read_alike_or_fail_alike(
    miles_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = list(LogReader(str(next(miles_run.glob("*run-*/*.wandb")))).records())
    rng = random.Random(1414)
    crafted = [history(rng, i) for i in range(50)]
    outcomes = {"same part": 0, "same error": 0}
    for case in range(1500):
        base = rng.sample(real, 3) + rng.sample(crafted, 2)
        r = rng.random()
        bad = (
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) if r < 0.2
            else mutate(rng, rng.choice(real if r < 0.6 else crafted))
        )
        base.insert(rng.randrange(len(base) + 1), bad)
        path = tmp_path / "fuzz.wandb"
        path.write_bytes(frame(base))
        fast, slow = read_both(path, monkeypatch)
        assert_same(fast, slow, f"case {case}: {bad!r}")
        outcomes["same error" if isinstance(slow, tuple) else "same part"] += 1
    assert min(outcomes.values()) > 100, outcomes  # both kinds exercised


def test_accepted_value_texts_parse_alike_on_every_route() -> None:
    """A text the decoder reads gives, bit for bit, what orjson (one parse of a batch),
    numpy's string cast and float() give -- the routes `texts_to_floats` may take."""
    rng = random.Random(53)
    texts = list(TEXTS)
    for _ in range(20000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        text = ("-" if rng.random() < 0.3 else "") + digits.lstrip("0") or "0"
        if rng.random() < 0.6:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        if rng.random() < 0.4:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 330))
        texts.append(text)
        texts.append(repr(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-300, 300)))
        # the fast path's domain (a significand below 2**53, 10**-22..10**22) and its edges
        texts.append(repr(rng.uniform(-1, 1) * 10.0 ** rng.randint(-25, 25)))
        mant = str(rng.choice([rng.randrange(2**53 - 5, 2**53 + 5), rng.randrange(10**19)]))
        point = rng.randrange(len(mant) + 1)
        texts.append(f"{mant[:point] or '0'}.{mant[point:] or '0'}e{rng.randint(-24, 24)}")
    accepted = 0
    for text in texts:
        got = _history.parse_value(text.encode())
        if got is None:
            continue
        value, flags = got
        bits = struct.pack("<d", value)
        if flags:  # marked, resolved per batch in decode.py (see the crafted records test)
            assert text in ("NaN", "Infinity", "-Infinity", "null", "true", "false", "-0"), text
            if text in ("NaN", "Infinity", "-Infinity"):
                assert bits == struct.pack("<d", wandb_decode.to_floats([text])[0][0]), text
            continue
        accepted += 1
        via_orjson = float(np.array([orjson.loads(text)], np.float64)[0])
        for other in (float(text), float(np.array([text], np.float64)[0]), via_orjson):
            assert struct.pack("<d", other) == bits, text
    assert accepted > 20000


# ---- the build ------------------------------------------------------------------------


NO_EXTENSION = r"""
import sys
sys.modules["gatekeeper.sources.wandb._history"] = None  # as if never built
from gatekeeper.sources.wandb import decode
assert decode.c_decoder() is None
print(decode.c_decoder_status())
part = decode.decode_range(sys.argv[1], 0, None, False)
print(len(part.steps), len(part.keys))
"""


def test_without_the_extension_the_python_path_reads_and_says_so(miles_run: Path) -> None:
    path = str(next(miles_run.glob("*run-*/*.wandb")))
    want = wandb_decode.decode_range(path, 0, None, False)
    for debug, said in (("1", True), ("", False)):
        env = dict(os.environ, GATEKEEPER_DEBUG=debug)
        proc = subprocess.run([sys.executable, "-c", NO_EXTENSION, path], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        status, counts = proc.stdout.splitlines()
        assert status.startswith("pure Python (the C extension") and "not built" in status
        assert counts == f"{len(want.steps)} {len(want.keys)}"
        assert ("pure-Python path, several times slower" in proc.stderr) == said, proc.stderr



def test_the_c_decoder_reads_a_long_file_in_one_process(
    miles_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the C decoder a long file is read serially (forked workers measured slower on
    2 cores, docs/wandb.md); the pure-Python path still forks."""
    path = str(next(miles_run.glob("*run-*/*.wandb")))
    joined: list[int] = []
    real_join = wandb_decode.join
    monkeypatch.setattr(wandb_decode, "join", lambda parts: joined.append(len(parts))
                        or real_join(parts))
    monkeypatch.setattr(wandb_decode, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(wandb_decode.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(wandb_decode.threading, "active_count", lambda: 1)
    serial = wandb_decode.decode(path, 0)
    assert joined == []
    monkeypatch.setattr(wandb_decode, "USE_C", False)
    forked = wandb_decode.decode(path, 0)
    assert joined and joined[0] > 1
    assert serial.steps == forked.steps and list(serial.keys) == list(forked.keys)
