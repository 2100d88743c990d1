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
from gatekeeper.sources.tensorboard.proto import (
    DT_BFLOAT16,
    DT_DOUBLE,
    DT_FLOAT,
    DT_HALF,
    DT_INT32,
    DT_INT64,
    Event,
)
from gatekeeper.sources.tensorboard.records import Framed

SCALARS_PLUGIN = "scalars"
_CONTENT = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}


@dataclass
class Columns:
    """New points by tag, in file order; `plugins` is the tag -> plugin map so far."""

    steps: dict[str, list[int]] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)
    plugins: dict[str, str] = field(default_factory=dict)

    def add(self, tag: str, step: int, value: float) -> None:
        steps = self.steps.get(tag)
        if steps is None:
            steps = self.steps[tag] = []
            self.values[tag] = []
        steps.append(step)
        self.values[tag].append(value)

    @property
    def points(self) -> int:
        return sum(len(s) for s in self.steps.values())


def decode(framed: Framed, columns: Columns, path: str) -> None:
    """Add every scalar of `framed`'s records to `columns`; a record that is not an Event,
    or a scalar tensor that is not a number, raises naming its byte offset."""
    parse = Event.FromString
    plugins = columns.plugins
    for payload, offset in zip(framed.payloads, framed.offsets):
        try:
            event = parse(payload)
        except Exception as exc:  # protobuf's DecodeError; the record passed its CRC
            raise RecordError(
                f"byte offset {offset}: record is not a TensorBoard Event ({exc})", file=path
            ) from None
        if not event.HasField("summary"):
            continue  # file_version, graphs, session logs: not metrics
        step = event.step
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                columns.add(value.tag, step, value.simple_value)
            elif kind == "tensor":
                tag = value.tag
                if value.HasField("metadata"):
                    name = value.metadata.plugin_data.plugin_name
                    if name:
                        plugins[tag] = name
                if plugins.get(tag) == SCALARS_PLUGIN:
                    columns.add(tag, step, _scalar(value.tensor, tag, offset, path))


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
