"""Run sources: one module per kind, opened from a SOURCE string by `open_source`."""

from __future__ import annotations

from gatekeeper.errors import UsageError
from gatekeeper.sources.base import RunOverrides, Source
from gatekeeper.sources.jsonl_source import JsonlSource
from gatekeeper.sources.wandb_api import WandbApiSource
from gatekeeper.sources.wandb_local import WandbLocalSource

# Tried in order; a kind is registered by adding its class here (remote schemes first,
# the catch-all local-path kind last).
SOURCE_KINDS: list[type[Source]] = [WandbApiSource, WandbLocalSource, JsonlSource]


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


__all__ = ["RunOverrides", "Source", "SOURCE_KINDS", "open_source", "register"]
