"""History records of a `.wandb` file to per-key numpy columns, serially or in parallel.

`decode_range` reads the records of one byte range: history items become per-key row
indices and float64 values, every other record but `summary` is handed back raw for the
caller's metadata. A long file is split at 32 KiB block boundaries (where the framing
can resynchronise) and decoded by forked worker processes; the parts are joined in order.

History records are decoded by the C extension `_history` (built at install when a C
compiler is present) straight into per-key columns; any record it is not certain to read
exactly as the protobuf runtime and the Python path below would is handed back to them
whole (see `_history.c`), so results and error messages do not depend on which one read
it. Without the extension every record takes the Python path (`c_decoder_status()` says
which; under `--debug` the slow path is noted on stderr).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from google.protobuf.message import DecodeError

from gatekeeper.errors import RecordError, quote
from gatekeeper.sources.slowpath import load_extension, note_python_path
from gatekeeper.sources.wandb.axes import NESTED, to_floats
from gatekeeper.sources.wandb.log import BLOCK_LEN, LogReader
from gatekeeper.sources.wandb.proto import narrowed_record_parser

Column = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # row indices, values, numeric

# Below this many new bytes, forking workers costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20
# With the C decoder one process reads a history item in ~0.2 us; forked workers then
# lose more to starting, returning and joining their parts than they win on 2 cores
# (bench_wandb, 362 MB run, load ~3: 3.34 s wall forked vs 2.90 s in one process, best
# of 3; docs/wandb.md). So they are used only for the pure-Python path, unless set.
FORK_WITH_C = False
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


# Decode history records in C when the extension is built (tests set it False to compare).
USE_C = True


def decode_range(path: str, start: int, stop: int | None, resync: bool) -> Part:
    reader = LogReader(path, start)
    parse = record_parser()
    fast = c_decoder()
    add_c = fast.add if fast is not None else None
    part = Part()
    steps = part.steps
    entries: dict[str, tuple[list[int], list[Any]]] = {}
    done: list[Part] = []
    try:
        for raw in reader.records(stop, resync):
            if add_c is not None:
                step = add_c(raw, len(steps))  # None: not a history record it reads exactly
                if step is not None:
                    steps.append(step)
                    if len(steps) % FLUSH_ROWS == 0:
                        done.append(_converted(entries, fast.flush()))
                        entries = {}
                    continue
            rec = parse(raw)
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                add_history(rec.history, len(steps), steps, entries)
                if len(steps) % FLUSH_ROWS == 0:  # JSON texts to floats, bounding memory
                    done.append(_converted(entries, fast.flush() if fast is not None else []))
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
    done.append(_converted(entries, fast.flush() if fast is not None else []))
    part.keys = _concat_keys(done)
    part.end, part.pending = reader.offset, reader.pending_bytes
    return part


CColumn = tuple[str, bytearray, bytearray, int]  # key, int64 rows, float64 values, flags


def _converted(entries: dict[str, tuple[list[int], list[Any]]], columns: list[CColumn]) -> Part:
    """Per-key columns of one batch of rows, from the Python path's (row, JSON text) lists
    and the C decoder's columns, keys in order of first appearance as the Python path
    alone orders them; `_`-keys other than the step are dropped (the C decoder drops them
    as it reads)."""
    out = Part()
    if not columns:
        for key, (rows, vals) in entries.items():
            if key.startswith("_"):
                continue  # _step is in `steps`; _timestamp, _runtime, _wandb are no metrics
            values, mask = texts_to_floats(vals)
            out.keys[key] = (np.asarray(rows, np.int64), values, mask)
        return out
    c_cols = {key: (np.frombuffer(r, np.int64), v, flags) for key, r, v, flags in columns}
    if not entries:
        for key, (c_rows, c_vals, flags) in c_cols.items():
            out.keys[key] = (c_rows, *_c_values(c_vals, flags))
        return out
    # Records of this batch were read by both paths: first appearances interleave by row
    # (a row is read whole by one of them, so a row's keys come from one path, in order).
    first: dict[str, tuple[int, int]] = {}
    for i, (key, (rows, _)) in enumerate(entries.items()):
        if not key.startswith("_"):
            first[key] = (rows[0], i)
    for i, (key, (c_rows, _, _)) in enumerate(c_cols.items()):
        if key not in first or int(c_rows[0]) < first[key][0]:
            first[key] = (int(c_rows[0]), i)
    for key in sorted(first, key=first.__getitem__):
        if key not in entries:
            c_rows, c_vals, flags = c_cols[key]
            out.keys[key] = (c_rows, *_c_values(c_vals, flags))
        elif key not in c_cols:
            py_rows, texts = entries[key]
            out.keys[key] = (np.asarray(py_rows, np.int64), *texts_to_floats(texts))
        else:
            out.keys[key] = _mixed(entries[key], c_cols[key])
    return out


def _c_values(vals: bytearray, flags: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A C column's values and mask, as `texts_to_floats` gives them for its texts. The
    texts the decoder marks depend on the route the batch takes there: `-0` is orjson's
    integer 0 (+0.0) when the batch is one orjson parse (no NaN/Infinity/null among its
    texts), else -0.0; the mask is all True (not None) when a null, or a bool alongside
    NaN/Infinity, makes numpy's cast fail and the texts are converted one by one."""
    values = np.frombuffer(vals, np.float64)
    if not flags:
        return values, None
    c = _c_module()
    null, special = flags & c.F_NULL, flags & c.F_SPECIAL
    bits = values.view(np.uint64)
    marked = [(bits == c.NULL_BITS, np.nan), (bits == c.TRUE_BITS, 1.0),
              (bits == c.FALSE_BITS, 0.0),
              (bits == c.NEGZERO_BITS, -0.0 if null or special else 0.0)]
    for where, value in marked:
        values[where] = value
    masked = null or (flags & c.F_BOOL and special)
    return values, np.ones(len(values), bool) if masked else None


def _mixed(
    py: tuple[list[int], list[Any]], c: tuple[np.ndarray, bytearray, int]
) -> Column:
    """One key of a batch read partly by each path: the C values written back as texts that
    every route of `texts_to_floats` reads as the same float64 (repr() round-trips; the
    marked texts as logged), merged by row, and converted as the Python path alone
    converts the batch."""
    py_rows, py_texts = py
    c_rows, c_vals, _ = c
    mod = _c_module()
    marks = {mod.NULL_BITS: "null", mod.NEGZERO_BITS: "-0", mod.TRUE_BITS: "true",
             mod.FALSE_BITS: "false"}
    values = np.frombuffer(c_vals, np.float64)
    c_texts = [
        marks.get(bits) or ("NaN" if v != v else "Infinity" if v == math.inf else
                            "-Infinity" if v == -math.inf else repr(v))
        for v, bits in zip(values.tolist(), values.view(np.uint64).tolist(), strict=True)
    ]
    rows = c_rows.tolist() + list(py_rows)
    texts = c_texts + list(py_texts)
    order = sorted(range(len(rows)), key=rows.__getitem__)  # stable: a row's own order kept
    floats, mask = texts_to_floats([texts[i] for i in order])
    return np.asarray([rows[i] for i in order], np.int64), floats, mask


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
    c_decoder = USE_C and _c_module() is not None and c_fields() is not None
    if c_decoder and not FORK_WITH_C:
        return decode_range(path, offset, None, False)
    if offset == 0:
        record_parser()  # import before forking, so workers inherit it
    # (c_fields() above also ran before forking: a missing extension is noted once)
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


@functools.cache
def _c_module() -> Any:
    """The compiled decoder module, or None (not built here: no C compiler at install)."""
    return load_extension("gatekeeper.sources.wandb._history", __name__, "wandb history is")


@functools.cache
def c_fields() -> dict[str, Any] | None:
    """The field numbers the C decoder reads, from the installed SDK's descriptor (so an
    SDK that renumbers or retypes a field cannot be mis-decoded): None, and the Python
    path, when a field it relies on is not what it expects."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from wandb.proto import wandb_internal_pb2

    pb: Any = wandb_internal_pb2

    rec, hist = pb.Record.DESCRIPTOR, pb.HistoryRecord.DESCRIPTOR
    step, item = pb.HistoryStep.DESCRIPTOR, pb.HistoryItem.DESCRIPTOR
    expect = [  # (message, field, type, repeated, message type)
        (rec, "num", F.TYPE_INT64, False, None),
        (rec, "history", F.TYPE_MESSAGE, False, hist),
        (hist, "item", F.TYPE_MESSAGE, True, item),
        (hist, "step", F.TYPE_MESSAGE, False, step),
        (step, "num", F.TYPE_INT64, False, None),
        (item, "key", F.TYPE_STRING, False, None),
        (item, "nested_key", F.TYPE_STRING, True, None),
        (item, "value_json", F.TYPE_STRING, False, None),
    ]
    for msg, name, kind, repeated, sub in expect:
        f = msg.fields_by_name.get(name)
        if (
            f is None or f.type != kind or _repeated(f) != repeated
            or (sub is not None and f.message_type.full_name != sub.full_name)
            or (msg is rec and name == "history" and f.containing_oneof is None)
        ):
            _note_python_path(f"the SDK's {msg.name}.{name} is not the field it reads")
            return None

    def others(msg: Any, names: set[str]) -> list[int]:
        return [f.number for f in msg.fields if f.name not in names]

    unread = {f.name for f in rec.fields} - READ_FIELDS  # unknown fields to record_parser
    return {
        "record.history": rec.fields_by_name["history"].number,
        "record.num": rec.fields_by_name["num"].number,
        "history.item": hist.fields_by_name["item"].number,
        "history.step": hist.fields_by_name["step"].number,
        "step.num": step.fields_by_name["num"].number,
        "item.key": item.fields_by_name["key"].number,
        "item.nested_key": item.fields_by_name["nested_key"].number,
        "item.value_json": item.fields_by_name["value_json"].number,
        "record.other": others(rec, {"num", "history"} | unread),
        "history.other": others(hist, {"item", "step"}),
        "step.other": others(step, {"num"}),
        "item.other": others(item, {"key", "nested_key", "value_json"}),
    }


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf >= 5.x
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(field.label == field.LABEL_REPEATED)


def c_decoder() -> Any:
    """A fresh C decoder for one range, or None: the Python path reads every record."""
    if not USE_C:
        return None
    module = _c_module()
    fields = c_fields() if module is not None else None
    if fields is None:
        return None
    return module.Decoder(fields, int.from_bytes(os.urandom(8), "little"))


def c_decoder_status() -> str:
    """Which path reads wandb history here, for --debug and the tests."""
    if _c_module() is None:
        return "pure Python (the C extension gatekeeper.sources.wandb._history is not built)"
    if c_fields() is None:
        return "pure Python (the SDK's history fields are not those the C decoder reads)"
    return "C (gatekeeper.sources.wandb._history)"


def _note_python_path(why: str) -> None:
    note_python_path(__name__, "wandb history is", why)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
