"""Run sources: one module per kind, opened from a SOURCE string by `open_source`."""

from __future__ import annotations

from gatekeeper.errors import UsageError
from gatekeeper.sources.base import LiveSource, RunOverrides, Source
from gatekeeper.sources.jsonl_source import JsonlSource
from gatekeeper.sources.live_jsonl import LiveJsonlSource
from gatekeeper.sources.mlflow import MlflowSource
from gatekeeper.sources.prometheus import PrometheusSource
from gatekeeper.sources.tensorboard import TensorBoardSource
from gatekeeper.sources.wandb_api import WandbApiSource
from gatekeeper.sources.wandb_local import WandbLocalSource

# Tried in order; a kind is registered by adding its class here (remote schemes first,
# the catch-all local-path kind last).
SOURCE_KINDS: list[type[Source]] = [
    TensorBoardSource,
    MlflowSource,
    PrometheusSource,
    WandbApiSource,
    WandbLocalSource,
    JsonlSource,
]


def register(kind: type[Source], *, first: bool = True) -> None:
    if kind not in SOURCE_KINDS:
        SOURCE_KINDS.insert(0 if first else len(SOURCE_KINDS), kind)


def open_source(spec: str) -> Source:
    """The source that understands `spec`, or a UsageError naming the accepted forms."""
    for kind in SOURCE_KINDS:
        if kind.accepts(spec):
            return kind(spec)
    raise UsageError(
        f"cannot open source {spec!r}: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in SOURCE_KINDS if k is not JsonlSource)
    )


def open_live_source(spec: str) -> LiveSource:
    """The source that follows `spec` while it is written: the first registered kind that
    accepts it and can be polled (wandb), else the JSONL tail (which waits for a file or
    directory that does not exist yet)."""
    for kind in SOURCE_KINDS:
        if issubclass(kind, LiveSource) and kind.accepts(spec):
            return kind(spec)
    if LiveJsonlSource.accepts(spec):
        return LiveJsonlSource(spec)
    raise UsageError(
        f"cannot follow source {spec!r} live: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in SOURCE_KINDS if issubclass(k, LiveSource))
    )


__all__ = [
    "LiveSource",
    "RunOverrides",
    "Source",
    "SOURCE_KINDS",
    "open_live_source",
    "open_source",
    "register",
]
