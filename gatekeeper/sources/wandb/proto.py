"""The SDK's protobuf `Record`, which every reader of a `.wandb` file parses records with."""

from __future__ import annotations

import functools
from typing import Any

from gatekeeper.errors import SourceError


@functools.cache
def sdk_record() -> Any:
    """The wandb SDK's `Record` class (upb runtime). Imported on first use: `import wandb`
    costs most of a second, and most commands never read a wandb run."""
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError as exc:
        raise SourceError(
            f"reading wandb runs needs the wandb SDK ({exc}); install gatekeeper[wandb]"
        ) from None
    pb: Any = wandb_internal_pb2  # generated at the SDK's build: no stubs say it has Record
    return pb.Record
