"""History records of a `.wandb` file to per-key numpy columns, serially or in parallel.

`decode_range` reads the records of one byte range: history items become per-key row
indices and float64 values, every other record but `summary` is handed back raw for the
caller's metadata. A long file is split at 32 KiB block boundaries (where the framing
can resynchronise) and decoded by forked worker processes; the parts are joined in order.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from gatekeeper.errors import RecordError, quote
from gatekeeper.sources.wandb.axes import NESTED, to_floats
from gatekeeper.sources.wandb.log import BLOCK_LEN, LogReader
from gatekeeper.sources.wandb.proto import narrowed_record_parser

Column = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # row indices, values, numeric

# Below this many new bytes, forking workers costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20
FLUSH_ROWS = 2048  # history rows whose JSON texts are held before converting to floats
EXACT_STEP = 2**53  # steps travel as float64 here: beyond this one may become another


class BadRecord(ValueError):
    """A record that parsed but holds what no run can (a `_step` that is not a step);
    `decode_range` adds the byte offset."""


@dataclass
class Part:
    """What one byte range held: `steps` per row, per-key (rows, values, numeric mask)."""

    steps: list[float] = field(default_factory=list)
    keys: dict[str, Column] = field(
        default_factory=dict
    )
    meta: list[Any] = field(default_factory=list)  # parsed non-history records, in order
    end: int = 0  # reader offset after the range
    pending: int = 0


# The Record fields a reader uses; the others (summary, stats, output, ...) stay unparsed.
READ_FIELDS = frozenset({"num", "history", "metric", "run", "exit", "config"})


def record_parser() -> Any:
    """`FromString` of the SDK's protobuf `Record`, narrowed to READ_FIELDS (a summary
    record, as large as each history record, is skipped as unknown bytes)."""
    return narrowed_record_parser(READ_FIELDS)


def decode_range(path: str, start: int, stop: int | None, resync: bool) -> Part:
    reader = LogReader(path, start)
    parse = record_parser()
    part = Part()
    steps = part.steps
    entries: dict[str, tuple[list[int], list[Any]]] = {}
    done: list[Part] = []
    try:
        for raw in reader.records(stop, resync):
            rec = parse(raw)
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                add_history(rec.history, len(steps), steps, entries)
                if len(steps) % FLUSH_ROWS == 0:  # JSON texts to floats, bounding memory
                    done.append(_converted(entries))
                    entries = {}
            elif kind is not None and kind != "summary":
                part.meta.append(rec)
    except DecodeError as exc:
        raise RecordError(
            f"record ending at byte {reader.offset} is not a wandb protobuf Record ({exc}); "
            "the file is damaged or of an unknown format",
            file=path,
        ) from None
    except BadRecord as exc:
        where = f"history record ending at byte {reader.offset}"
        raise RecordError(f"{where}: {exc}", file=path) from None
    done.append(_converted(entries))
    part.keys = _concat_keys(done)
    part.end, part.pending = reader.offset, reader.pending_bytes
    return part


def _converted(entries: dict[str, tuple[list[int], list[Any]]]) -> Part:
    """Per-key columns of one batch of rows; `_`-keys other than the step are dropped."""
    out = Part()
    for key, (rows, vals) in entries.items():
        if key.startswith("_"):
            continue  # _step is in `steps`; _timestamp, _runtime, _wandb are no metrics
        values, mask = texts_to_floats(vals)
        out.keys[key] = (np.asarray(rows, np.int64), values, mask)
    return out


def texts_to_floats(texts: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """JSON texts of history values to float64 (see `to_floats`), fast when all are plain
    numbers: one orjson parse of the joined texts instead of one conversion per value."""
    if texts and isinstance(texts[0], str):
        try:
            joined = ",".join(texts)
        except TypeError:  # a typed (non-text) value among them
            return to_floats(texts)
        if not any(c in joined for c in ('"', "{", "[", "null")):
            try:
                parsed = orjson.loads(f"[{joined}]")
            except orjson.JSONDecodeError:
                parsed = None  # NaN/Infinity are not JSON to orjson; the general path reads them
            # a text holding a comma ("1,2") would shift every later value: count them
            if parsed is not None and len(parsed) == len(texts):
                try:
                    return np.array(parsed, dtype=np.float64), None
                except (TypeError, ValueError, OverflowError):
                    pass
    return to_floats(texts)


def _decode_range_bytes(path: str, start: int, stop: int | None, resync: bool) -> Part:
    """A worker's part, with metadata records serialized (protobuf messages do not pickle)."""
    part = decode_range(path, start, stop, resync)
    part.meta = [rec.SerializeToString() for rec in part.meta]
    return part


def decode(path: str, offset: int) -> Part:
    """Every complete record after `offset`, joined into one Part."""
    size = _size(path)
    workers = min(os.cpu_count() or 1, 8)
    # fork is only safe while this process has one thread (a daemon has many: read serially)
    if size - offset < PARALLEL_MIN_BYTES or workers < 2 or threading.active_count() > 1:
        return decode_range(path, offset, None, False)
    if offset == 0:
        record_parser()  # import before forking, so workers inherit it
    # here, not at the top: every `check` imports the source kinds, most never fork
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    bounds = _bounds(offset, size, workers)
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [
            pool.submit(_decode_range_bytes, path, lo, hi, i > 0)
            for i, (lo, hi) in enumerate(bounds)
        ]
        parts = [f.result() for f in futures]
    parse = record_parser()
    for part in parts:
        part.meta = [parse(raw) for raw in part.meta]
    return join(parts)


def _bounds(offset: int, size: int, n: int) -> list[tuple[int, int | None]]:
    """`n` ranges from `offset` to the end, cut at block boundaries."""
    step = max(BLOCK_LEN, (size - offset) // n // BLOCK_LEN * BLOCK_LEN)
    aligned = offset // BLOCK_LEN * BLOCK_LEN
    cuts = [offset] + [c for c in (aligned + k * step for k in range(1, n)) if offset < c < size]
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False)] + [(cuts[-1], None)]


def join(parts: list[Part]) -> Part:
    """Parts of consecutive ranges as one (row indices shifted to count from the first)."""
    out = Part(end=parts[-1].end, pending=parts[-1].pending)
    shifted: list[Part] = []
    for part in parts:
        base = len(out.steps)
        out.steps.extend(part.steps)
        out.meta.extend(part.meta)
        keys = {k: (rows + base, v, m) for k, (rows, v, m) in part.keys.items()}
        shifted.append(Part(keys=keys))
    out.keys = _concat_keys(shifted)
    return out


def _concat_keys(parts: list[Part]) -> dict[str, Column]:
    chunks: dict[str, list[Column]] = {}
    for part in parts:
        for key, item in part.keys.items():
            chunks.setdefault(key, []).append(item)
    out: dict[str, Column] = {}
    for key, items in chunks.items():
        if len(items) == 1:
            out[key] = items[0]
            continue
        rows = np.concatenate([r for r, _, _ in items])
        values = np.concatenate([v for _, v, _ in items])
        masks = [m if m is not None else np.ones(len(v), bool) for _, v, m in items]
        mask = None if all(m is None for _, _, m in items) else np.concatenate(masks)
        out[key] = (rows, values, mask)
    return out


def add_history(
    h: Any, row: int, steps: list[float], entries: dict[str, tuple[list[int], list[Any]]]
) -> None:
    """One history row into per-key (row indices, JSON texts). The reader's hot loop."""
    if not h.HasField("step"):
        _add_history_stepless(h, row, steps, entries)
        return
    if not -EXACT_STEP <= h.step.num <= EXACT_STEP:
        raise BadRecord(f"step {h.step.num} is beyond 2**53, where steps lose their identity")
    steps.append(float(h.step.num))
    for it in h.item:
        nk = it.nested_key
        key = nk[0] if len(nk) == 1 else (NESTED.join(nk) if nk else it.key)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = ([], [])
        entry[0].append(row)
        entry[1].append(it.value_json or _typed_value(it))


def _add_history_stepless(
    h: Any, row: int, steps: list[float], entries: dict[str, tuple[list[int], list[Any]]]
) -> None:
    """Older files may carry the step only as the `_step` item."""
    step = float("nan")
    for it in h.item:
        nk = it.nested_key
        key = nk[0] if len(nk) == 1 else (NESTED.join(nk) if nk else it.key)
        value = it.value_json or _typed_value(it)
        if key == "_step" and value is not None:
            step = _step_value(value)
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = ([], [])
        entry[0].append(row)
        entry[1].append(value)
    steps.append(step if step == step else float(row))


def _step_value(value: Any) -> float:
    """A `_step` item (JSON text or a typed value) as a whole number within 2**53."""
    if isinstance(value, str):
        try:
            number = orjson.loads(value)
        except orjson.JSONDecodeError:
            number = value
    else:
        number = value
    ok = isinstance(number, (int, float)) and not isinstance(number, bool)
    if ok and math.isfinite(number) and number == int(number) and abs(number) <= EXACT_STEP:
        return float(number)
    raise BadRecord(f"_step must be a whole number within 2**53, got {quote(value)}")


def _typed_value(it: Any) -> Any:
    """Newer SDKs may send a typed value instead of JSON text."""
    kind = it.WhichOneof("value")
    if kind in ("integer", "number", "boolean"):
        return getattr(it, kind)
    return None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
