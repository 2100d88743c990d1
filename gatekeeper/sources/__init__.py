"""Run sources: one package per family, opened from a SOURCE string by `open_source`.

`FAMILIES` holds the source families: every package here with a `KIND` (a `SourceFamily`
stating its Source and LiveSource classes, annotator and discovery); `base.py` states
the contract they implement. `SOURCE_KINDS` is derived from it for callers that try
kinds in order, and `register` adds a kind from outside (tests, plug-ins).
"""

from __future__ import annotations

import importlib
import pkgutil

from gatekeeper.errors import UsageError
from gatekeeper.sources.base import LiveSource, RunOverrides, Source, SourceFamily
from gatekeeper.sources.jsonl import JsonlSource
from gatekeeper.sources.plugins import with_plugins

# Asked in order: a family whose SOURCE strings have a scheme or a recognisable layout
# first (tensorboard://, mlflow+, prom+, wandb), the catch-all local-path family last
# (jsonl). Any other package here with a `KIND` is a family too, asked before jsonl:
# adding a source family is adding its package.
_ORDER = ("tensorboard", "mlflow", "prometheus", "wandb")
_LAST = "jsonl"


def _families() -> tuple[SourceFamily, ...]:
    found = [info.name for info in pkgutil.iter_modules(__path__) if info.ispkg]
    names = [*_ORDER, *sorted(set(found) - {*_ORDER, _LAST}), _LAST]
    kinds = (getattr(importlib.import_module(f"{__name__}.{n}"), "KIND", None) for n in names)
    return tuple(k for k in kinds if isinstance(k, SourceFamily))


FAMILIES: tuple[SourceFamily, ...] = _families()

# Tried in order by `open_source` (remote schemes first, the catch-all local kind last).
SOURCE_KINDS: list[type[Source]] = [kind for family in FAMILIES for kind in family.sources]


def register(kind: type[Source], *, first: bool = True) -> None:
    if kind not in SOURCE_KINDS:
        SOURCE_KINDS.insert(0 if first else len(SOURCE_KINDS), kind)


def open_source(spec: str) -> Source:
    """The source that understands `spec`, or a UsageError naming the accepted forms."""
    kinds = with_plugins(SOURCE_KINDS)
    for kind in kinds:
        if kind.accepts(spec):
            return kind(spec)
    raise UsageError(
        f"cannot open source {spec!r}: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in kinds if k is not JsonlSource)
    )


def open_live_source(spec: str) -> LiveSource:
    """The source that follows `spec` while it is written: the first registered kind that
    accepts it and can be polled (wandb), else a family's tail that waits for the run to
    appear (JSONL: a file or directory that does not exist yet)."""
    kinds = [k for k in with_plugins(SOURCE_KINDS) if issubclass(k, LiveSource)]
    for kind in kinds:
        if kind.accepts(spec):
            return kind(spec)
    for family in FAMILIES:
        for live in family.live_sources:
            if live.accepts(spec):
                return live(spec)
    raise UsageError(
        f"cannot follow source {spec!r} live: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in kinds)
    )


__all__ = [
    "FAMILIES",
    "LiveSource",
    "RunOverrides",
    "Source",
    "SOURCE_KINDS",
    "SourceFamily",
    "open_live_source",
    "open_source",
    "register",
]
