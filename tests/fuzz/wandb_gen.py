""".wandb transaction logs built record by record with the SDK's own protobuf classes, and
hostile variants of them (labelled like tests/fuzz/gen.py cases).

The framing is LevelDB's log format (see gatekeeper/sources/wandb/log.py): records are
split into FULL / FIRST / MIDDLE / LAST chunks at 32 KiB block boundaries.
"""

from __future__ import annotations

import random
import struct
import zlib

from wandb.proto import wandb_internal_pb2 as pb

from tests.fuzz.gen import Case, mutate

BLOCK = 32768
HEADER = b":W&B\xe1\xbe\x00"

STEP_TEXTS_OK = ["0", "3", "12.0", "9007199254740992"]
STEP_TEXTS_BAD = ["abc", "1e300", "true", "[1]", '"3"', "0.5", "NaN", "{}", "1e999", "-1e300"]
VALUE_TEXTS = [
    "0.5",
    "1,2",
    "3, 4",
    "NaN",
    "Infinity",
    "-Infinity",
    "null",
    '"text"',
    "[1, 2]",
    "{}",
    "true",
    "1e999",
    "",
    "12345678901234567890123",
    '{"_type": "histogram"}',
    "1_000",
]


def frame(records: list[bytes]) -> bytes:
    """Records as a .wandb file, chunked across 32 KiB blocks as the SDK writes them."""
    out = bytearray(HEADER)
    for data in records:
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\x00" * left
                left = BLOCK
            room = left - 7
            piece, data = data[:room], data[room:]
            kind = (1 if first else 4) if not data else (2 if first else 3)
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind])))
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not data:
                break
    return bytes(out)


def _config(rng: random.Random) -> pb.Record:
    cfg = pb.ConfigRecord()
    for _ in range(rng.randrange(4)):
        item = cfg.update.add()
        depth = rng.randrange(1, 4)
        keys = [rng.choice(["model", "lr", "a", "b"]) for _ in range(depth)]
        if depth == 1 and rng.random() < 0.5:
            item.key = keys[0]
        else:
            item.nested_key.extend(keys)
        item.value_json = rng.choice(
            ['{"x": 1}', "5", '"s"', "NaN", "[1", "null", '{"a": {"b": 2}}']
        )
    if rng.random() < 0.3:
        rm = cfg.remove.add()
        rm.nested_key.extend(["model", "a"])
    return pb.Record(config=cfg)


def wandb_case(seed: int) -> tuple[Case, list[bytes]]:
    """A run's records; with probability 1/3 one stepless row has a bad `_step`."""
    rng = random.Random(seed)
    records: list[pb.Record] = []
    run = pb.RunRecord(run_id=f"r{seed}", display_name=rng.choice(["ok", "a\nb::x", "ü"]))
    records.append(pb.Record(run=run))
    if rng.random() < 0.5:
        records.append(
            pb.Record(metric=pb.MetricRecord(glob_name="train/*", step_metric="train/step"))
        )
    bad_row = rng.randrange(6) if rng.random() < 1 / 3 else None
    for i in range(6):
        if rng.random() < 0.3:
            records.append(_config(rng))
        items = [pb.HistoryItem(key="loss", value_json=rng.choice(VALUE_TEXTS))]
        items.append(pb.HistoryItem(key="train/loss", value_json=rng.choice(VALUE_TEXTS)))
        items.append(pb.HistoryItem(key="train/step", value_json=str(i)))
        if i == bad_row or rng.random() < 0.3:
            text = rng.choice(STEP_TEXTS_BAD) if i == bad_row else rng.choice(STEP_TEXTS_OK)
            items.append(pb.HistoryItem(key="_step", value_json=text))
            records.append(pb.Record(history=pb.HistoryRecord(item=items)))
        else:
            h = pb.HistoryRecord(item=items)
            h.step.num = i
            records.append(pb.Record(history=h))
    if rng.random() < 0.8:
        records.append(pb.Record(exit=pb.RunExitRecord(exit_code=rng.choice([0, 0, 1]))))
    raw = [r.SerializeToString() for r in records]
    bad = {0} if bad_row is not None else None  # .wandb errors name a byte, not a line
    return Case(f"wandb-{seed}", frame(raw), bad), raw


def wandb_mutant(seed: int) -> Case:
    """Either one record's bytes mutated under a valid CRC (garbage reaches protobuf), or
    the framed file mutated (the framing and CRC checks see it)."""
    rng = random.Random(seed)
    case, raw = wandb_case(seed * 31 + 5)
    if rng.random() < 0.6:
        i = rng.randrange(len(raw))
        raw[i] = mutate(rng, raw[i], rng.randrange(1, 4))
        data = frame(raw)
    else:
        data = mutate(rng, case.data, rng.randrange(1, 4))
    return Case(f"wandb-mutant-{seed}", data, None, False)
