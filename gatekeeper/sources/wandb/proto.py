"""The SDK's protobuf `Record`, which every reader of a `.wandb` file parses records with."""

from __future__ import annotations

import functools
from typing import Any

from gatekeeper.extras import load


@functools.cache
def sdk_record() -> Any:
    """The wandb SDK's `Record` class (upb runtime). Imported on first use: `import wandb`
    costs most of a second, and most commands never read a wandb run."""
    pb: Any = load("wandb.proto.wandb_internal_pb2", "wandb", "reading wandb runs")
    return pb.Record  # generated at the SDK's build: no stubs say it has Record
