"""The SDK's protobuf `Record`, narrowed to the fields one reader uses.

A `.wandb` file holds history, summary, config, stats, ... records side by side. A reader
that parses every record with a `Record` narrowed to its fields (the others are skipped
as unknown bytes) pays only for what it reads: the history reader skips the summaries
(each as large as a history record), the summary reader skips the history.
"""

from __future__ import annotations

import functools
from typing import Any

from gatekeeper.extras import load


@functools.cache
def narrowed_record_parser(fields: frozenset[str]) -> Any:
    """`FromString` of the SDK's `Record` keeping only `fields`.

    Built from the descriptor the installed SDK ships, in a private descriptor pool: the
    same wire format, so the fields kept are parsed and checked exactly as the SDK would.
    """
    # Imported on first use: `import wandb` costs a second, and most commands never read wandb.
    wandb_internal_pb2 = load("wandb.proto.wandb_internal_pb2", "wandb", "reading wandb runs")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    sdk_file = wandb_internal_pb2.DESCRIPTOR
    proto = descriptor_pb2.FileDescriptorProto.FromString(sdk_file.serialized_pb)
    record = next(m for m in proto.message_type if m.name == "Record")
    kept = [f for f in record.field if f.name in fields]
    del record.field[:]
    record.field.extend(kept)
    pool = descriptor_pool.DescriptorPool()
    _add_file_deps(pool, sdk_file)
    pool.Add(proto)
    full_name = f"{proto.package}.Record" if proto.package else "Record"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name)).FromString


def _add_file_deps(pool: Any, file: Any) -> None:
    from google.protobuf import descriptor_pb2

    for dep in file.dependencies:
        _add_file_deps(pool, dep)
        try:
            pool.FindFileByName(dep.name)
        except KeyError:
            proto = descriptor_pb2.FileDescriptorProto()
            dep.CopyToProto(proto)
            pool.Add(proto)
