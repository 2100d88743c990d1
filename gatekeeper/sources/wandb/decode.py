"""History records of a `.wandb` file to per-key numpy columns, in one process.

`decode` reads every complete record after an offset with the SDK's own protobuf `Record`
(the upb runtime): history items become per-key row indices and float64 values; the
records a reader's metadata needs (run, config, metric, exit) are handed back parsed.
This is the only decoder: a 1M-point run reads in about 1.2 s of CPU, most of it upb
making each item's key and value text; docs/wandb.md#speed says where the rest goes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from gatekeeper.errors import RecordError, quote
from gatekeeper.sources.wandb.axes import NESTED, to_floats
from gatekeeper.sources.wandb.log import LogReader
from gatekeeper.sources.wandb.proto import sdk_record

Column = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # row indices, values, numeric
Entries = dict[str, tuple[list[int], list[Any]]]  # key -> (row indices, JSON texts)

FLUSH_ROWS = 2048  # history rows whose JSON texts are held before converting to floats
EXACT_STEP = 2**53  # steps travel as float64 here: beyond this one may become another
# The records a reader applies to its metadata; the rest (summary, stats, console output,
# files, ...) are dropped as they are read, so a long run's output lines are not held.
META_KINDS = frozenset({"run", "config", "metric", "exit"})


class BadRecord(ValueError):
    """A record that parsed but holds what no run can (a `_step` that is not a step);
    `decode` adds the byte offset."""


@dataclass
class Part:
    """What the new records held: `steps` per row, per-key (rows, values, numeric mask)."""

    steps: list[float] = field(default_factory=list)
    keys: dict[str, Column] = field(default_factory=dict)
    meta: list[Any] = field(default_factory=list)  # parsed META_KINDS records, in order
    # how many history rows came before the SDK's `set_step_log` telemetry (the trainer's
    # first `wandb.log(..., step=)`), None if it is not among these records: segments.py
    step_log_at: int | None = None
    end: int = 0  # reader offset after the records read
    pending: int = 0  # bytes after `end` that do not yet form a whole record


def decode(path: str, offset: int) -> Part:
    """Every complete record after `offset`: history as columns, META_KINDS as records."""
    reader = LogReader(path, offset)
    parse = sdk_record().FromString
    part = Part()
    steps = part.steps
    entries: Entries = {}
    batches: list[dict[str, Column]] = []
    try:
        for raw in reader.records():
            rec = parse(raw)
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                add_history(rec.history, len(steps), steps, entries)
                if len(steps) % FLUSH_ROWS == 0:  # JSON texts to floats, bounding memory
                    batches.append(_converted(entries))
                    entries = {}
            elif kind in META_KINDS:
                part.meta.append(rec)
            elif kind == "telemetry" and part.step_log_at is None:
                if rec.telemetry.feature.set_step_log:
                    part.step_log_at = len(steps)
    except DecodeError as exc:
        raise RecordError(
            f"record ending at byte {reader.offset} is not a wandb protobuf Record ({exc}); "
            "the file is damaged or of an unknown format",
            file=path,
        ) from None
    except BadRecord as exc:
        where = f"history record ending at byte {reader.offset}"
        raise RecordError(f"{where}: {exc}", file=path) from None
    batches.append(_converted(entries))
    part.keys = _concat_keys(batches)
    part.end, part.pending = reader.offset, reader.pending_bytes
    return part


def _converted(entries: Entries) -> dict[str, Column]:
    """One batch of rows as per-key columns, keys in order of first appearance; `_`-keys
    are dropped (`_step` is in `steps`; `_timestamp`, `_runtime`, `_wandb` are no metrics)."""
    out: dict[str, Column] = {}
    for key, (rows, texts) in entries.items():
        if not key.startswith("_"):
            out[key] = (np.asarray(rows, np.int64), *texts_to_floats(texts))
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


def _concat_keys(batches: list[dict[str, Column]]) -> dict[str, Column]:
    """The batches' columns joined per key (keys in order of first appearance)."""
    chunks: dict[str, list[Column]] = {}
    for batch in batches:
        for key, item in batch.items():
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


def add_history(h: Any, row: int, steps: list[float], entries: Entries) -> None:
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


def _add_history_stepless(h: Any, row: int, steps: list[float], entries: Entries) -> None:
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
