"""Decode verified event records into per-tag (step, value) columns.

Scalars come in two forms and both are read: the legacy `Summary.Value.simple_value`
(tensorboardX, `torch.utils.tensorboard` by default) and a rank-0 tensor whose metadata
names the `scalars` plugin (TF2 `tf.summary.scalar`, torch with `new_style=True`). TF2
writes that metadata only on a tag's first event, so the tag -> plugin map persists across
polls and files. Values of other plugins (images, histograms, text) are skipped undecoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.errors import RecordError
from gatekeeper.sources.tensorboard.fastpath import Scalars, simple_scalars
from gatekeeper.sources.tensorboard.proto import (
    DT_BFLOAT16,
    DT_DOUBLE,
    DT_FLOAT,
    DT_HALF,
    DT_INT32,
    DT_INT64,
    SESSION_START,
    Event,
)
from gatekeeper.sources.tensorboard.records import Framed
from gatekeeper.sources.tensorboard.restarts import EventInfo, Restarts, is_v2

SCALARS_PLUGIN = "scalars"
_CONTENT = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}


@dataclass
class Columns:
    """New points by tag as (record number, step, value) chunks; `plugins` is the tag ->
    plugin map so far. Record numbers keep file order among points of one step."""

    chunks: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = field(
        default_factory=dict
    )
    plugins: dict[str, str] = field(default_factory=dict)
    points: int = 0
    records: int = 0  # records decoded so far, across chunks and files: numbers them

    def add(self, tag: str, index: np.ndarray, steps: np.ndarray, values: np.ndarray) -> None:
        self.chunks.setdefault(tag, []).append((index, steps, values))
        self.points += int(index.size)

    def series(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of `tag` in file order."""
        parts = self.chunks[tag]
        index = np.concatenate([p[0] for p in parts])
        steps = np.concatenate([p[1] for p in parts]).astype(np.int64)
        values = np.concatenate([p[2] for p in parts]).astype(np.float64)
        if len(parts) > 1:
            order = np.argsort(index, kind="stable")
            steps, values = steps[order], values[order]
        return steps, values


def decode(framed: Framed, columns: Columns, path: str, restarts: Restarts) -> None:
    """Add every scalar of `framed`'s records to `columns`: the common one-scalar event in
    bulk (fastpath.py), every other record through protobuf; `restarts` reads the events in
    order. A record that is not an Event, or a scalar tensor that is not a number, raises
    naming its byte offset."""
    if not framed.starts:
        return
    base = columns.records
    columns.records += len(framed.starts)
    fast = simple_scalars(framed.data, framed.starts, framed.lengths)
    for k, name in enumerate(fast.names):
        mine = fast.tags == k
        if mine.any():  # a tag that is not UTF-8 names no record here: protobuf refuses it
            columns.add(name, fast.index[mine] + base, fast.steps[mine], fast.values[mine])
    rest = np.ones(len(framed.starts), bool)
    rest[fast.index] = False
    if framed.base == 0 and not rest[0]:
        restarts.headless()  # a file opening on a scalar: its rule is its predecessor's
    slow: dict[str, tuple[list[int], list[int], list[float]]] = {}
    done = -1  # the last record the restart rules have read
    for i in np.flatnonzero(rest).tolist():
        scalars, info = _event_scalars(framed, i, columns.plugins, path)
        _fast_run(restarts, fast, base, done, i)
        if framed.base == 0 and i == 0 and not (info.version and is_v2(info.version)):
            restarts.headless()
        restarts.event(base + i, info)
        done = i
        for tag, step, value in scalars:
            entry = slow.setdefault(tag, ([], [], []))
            entry[0].append(base + i)
            entry[1].append(step)
            entry[2].append(value)
    _fast_run(restarts, fast, base, done, len(framed.starts))
    for tag, (index, steps, values) in slow.items():
        columns.add(tag, np.asarray(index, np.int64), np.asarray(steps, np.int64),
                    np.asarray(values, np.float64))


def _fast_run(restarts: Restarts, fast: Scalars, base: int, after: int, before: int) -> None:
    """The fast path's records between two protobuf-decoded ones, to the restart rules."""
    if restarts.v2:
        return  # they change nothing then: skip the search
    lo, hi = np.searchsorted(fast.index, [after + 1, before])
    if hi > lo:
        restarts.scalars(fast.index[lo:hi] + base, fast.steps[lo:hi], fast.tags[lo:hi],
                         fast.names)


def _event_scalars(
    framed: Framed, i: int, plugins: dict[str, str], path: str
) -> tuple[list[tuple[str, int, float]], EventInfo]:
    try:
        event = Event.FromString(framed.payload(i))
    except Exception as exc:  # protobuf's DecodeError; the record passed its CRC
        raise RecordError(
            f"byte offset {framed.offset(i)}: record is not a TensorBoard Event ({exc})",
            file=path,
        ) from None
    out: list[tuple[str, int, float]] = []
    step = event.step
    what = event.WhichOneof("what")
    info = EventInfo(
        step=step,
        version=event.file_version if what == "file_version" else None,
        start=what == "session_log" and event.session_log.status == SESSION_START,
        tags=tuple(v.tag for v in event.summary.value) if what == "summary" else None,
    )
    for value in event.summary.value:  # empty for file_version, graphs, session logs
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            out.append((value.tag, step, value.simple_value))
        elif kind == "tensor":
            tag = value.tag
            if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
                plugins[tag] = value.metadata.plugin_data.plugin_name
            if plugins.get(tag) == SCALARS_PLUGIN:
                out.append((tag, step, _scalar(value.tensor, tag, framed.offset(i), path)))
    return out, info


def _scalar(tensor: object, tag: str, offset: int, path: str) -> float:
    t: Any = tensor
    size = 1
    for dim in t.tensor_shape.dim:
        size *= dim.size
    dtype = t.dtype
    if size == 1:
        if dtype == DT_FLOAT and t.float_val:
            return float(t.float_val[0])
        if dtype == DT_DOUBLE and t.double_val:
            return float(t.double_val[0])
        if dtype == DT_INT32 and t.int_val:
            return float(t.int_val[0])
        if dtype == DT_INT64 and t.int64_val:
            return float(t.int64_val[0])
        if dtype in (DT_HALF, DT_BFLOAT16) and t.half_val:
            return _half(t.half_val[0], dtype)
        content = t.tensor_content
        fmt = _CONTENT.get(dtype)
        if fmt and len(content) == struct.calcsize(fmt):
            return float(struct.unpack(fmt, content)[0])
        if dtype == DT_BFLOAT16 and len(content) == 2:
            return _half(int.from_bytes(content, "little"), dtype)
    raise RecordError(
        f"byte offset {offset}: scalar {tag!r} is a tensor of dtype {dtype} with {size} "
        "elements; expected one float or int",
        file=path,
    )


def _half(bits: int, dtype: int) -> float:
    if dtype == DT_BFLOAT16:
        return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])
    return float(np.array([bits], dtype=np.uint16).view(np.float16)[0])
