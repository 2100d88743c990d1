"""The few TensorBoard protobuf messages a gate reads, declared here from their field numbers.

Declaring them (instead of importing tensorflow's, tensorboard's or tensorboardX's generated
modules) keeps the runtime dependency to `protobuf` alone. Only what a scalar needs is
declared: `Summary.Value.image`, `histo`, `audio` stay unknown fields, so they are skipped
as raw bytes, never decoded. `Event`'s oneof `what` is declared whole (graphs and run
metadata as bytes): which member an event holds decides TensorBoard's restart rules
(restarts.py), and a later member on the wire replaces an earlier one, as in TensorBoard.
Field numbers follow tensorboard/compat/proto/{event,summary,tensor,tensor_shape}.proto.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "gatekeeper.tensorboard"


def _message(
    file: descriptor_pb2.FileDescriptorProto,
    name: str,
    fields: list[tuple[str, int, int, int, str | None]],
    oneof: tuple[str, set[str]] | None = None,
) -> None:
    msg = file.message_type.add(name=name)
    if oneof is not None:
        msg.oneof_decl.add(name=oneof[0])
    for fname, number, ftype, label, type_name in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None and fname in oneof[1]:
            field.oneof_index = 0


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="gatekeeper_tensorboard.proto", package=_PACKAGE, syntax="proto3"
    )
    one, rep = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    _message(f, "Dim", [("size", 1, _F.TYPE_INT64, one, None)])
    _message(f, "TensorShape", [("dim", 2, _F.TYPE_MESSAGE, rep, "Dim")])
    _message(
        f,
        "Tensor",
        [
            ("dtype", 1, _F.TYPE_INT32, one, None),
            ("tensor_shape", 2, _F.TYPE_MESSAGE, one, "TensorShape"),
            ("tensor_content", 4, _F.TYPE_BYTES, one, None),
            ("float_val", 5, _F.TYPE_FLOAT, rep, None),
            ("double_val", 6, _F.TYPE_DOUBLE, rep, None),
            ("int_val", 7, _F.TYPE_INT32, rep, None),
            ("int64_val", 10, _F.TYPE_INT64, rep, None),
            ("half_val", 13, _F.TYPE_INT32, rep, None),
        ],
    )
    _message(f, "PluginData", [("plugin_name", 1, _F.TYPE_STRING, one, None)])
    _message(f, "Metadata", [("plugin_data", 1, _F.TYPE_MESSAGE, one, "PluginData")])
    _message(
        f,
        "Value",
        [
            ("tag", 1, _F.TYPE_STRING, one, None),
            ("simple_value", 2, _F.TYPE_FLOAT, one, None),
            ("tensor", 8, _F.TYPE_MESSAGE, one, "Tensor"),
            ("metadata", 9, _F.TYPE_MESSAGE, one, "Metadata"),
        ],
        oneof=("value", {"simple_value", "tensor"}),
    )
    _message(f, "Summary", [("value", 1, _F.TYPE_MESSAGE, rep, "Value")])
    _message(f, "SessionLog", [("status", 1, _F.TYPE_INT32, one, None)])
    _message(
        f,
        "Event",
        [
            ("wall_time", 1, _F.TYPE_DOUBLE, one, None),
            ("step", 2, _F.TYPE_INT64, one, None),
            ("file_version", 3, _F.TYPE_STRING, one, None),
            ("graph_def", 4, _F.TYPE_BYTES, one, None),
            ("summary", 5, _F.TYPE_MESSAGE, one, "Summary"),
            ("log_message", 6, _F.TYPE_BYTES, one, None),
            ("session_log", 7, _F.TYPE_MESSAGE, one, "SessionLog"),
            ("tagged_run_metadata", 8, _F.TYPE_BYTES, one, None),
            ("meta_graph_def", 9, _F.TYPE_BYTES, one, None),
        ],
        oneof=("what", {"file_version", "graph_def", "summary", "log_message", "session_log",
                        "tagged_run_metadata", "meta_graph_def"}),
    )
    return f


def _event_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Event"))


Event: Any = _event_class()

# event.proto's SessionLog.SessionStatus: a writer (re)starting, `purge_step` its step.
SESSION_START = 1

# tensorflow/core/framework/types.proto: the dtypes a scalar summary is written in.
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF, DT_BFLOAT16 = 1, 2, 3, 9, 19, 14
