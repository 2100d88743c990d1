"""Run sources: one package per family, opened from a SOURCE string by `open_source`.

`FAMILIES` holds the source families: every package here with a `KIND` (a `SourceFamily`
stating its Source and LiveSource classes, annotator and discovery); `base.py` states
the contract they implement. `SOURCE_KINDS` is derived from it for callers that try
kinds in order, and `register` adds a kind from outside (tests, plug-ins).

Start-up: FAMILIES and SOURCE_KINDS are built (every family package imported) when first
used. `open_source` of an existing `*.jsonl` file with no other family's mark on its name
(`_surely_jsonl`) asks only the plug-in kinds and the JSONL kind: a small check imports
no other family's modules (~15 ms). `tests/sources/test_detection.py` holds it to what
asking every family answers.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import stat
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.sources.base import LiveSource, RunOverrides, Source, SourceFamily
from gatekeeper.sources.plugins import with_plugins

# Asked in order: a family whose SOURCE strings have a scheme or a recognisable layout
# first (tensorboard://, mlflow+, prom+, wandb), the catch-all local-path family last
# (jsonl). Any other package here with a `KIND` is a family too, asked before jsonl:
# adding a source family is adding its package.
_ORDER = ("tensorboard", "mlflow", "prometheus", "wandb")
_LAST = "jsonl"


def _packages() -> list[str]:
    return [info.name for info in pkgutil.iter_modules(__path__) if info.ispkg]


def _families() -> tuple[SourceFamily, ...]:
    found = _packages()
    names = [*_ORDER, *sorted(set(found) - {*_ORDER, _LAST}), _LAST]
    kinds = (getattr(importlib.import_module(f"{__name__}.{n}"), "KIND", None) for n in names)
    return tuple(k for k in kinds if isinstance(k, SourceFamily))


# Declared, not bound: the module's __getattr__ builds them when first asked for.
FAMILIES: tuple[SourceFamily, ...]
SOURCE_KINDS: list[type[Source]]
_built: dict[str, Any] = {}


def families() -> tuple[SourceFamily, ...]:
    """FAMILIES: every family package imported, once."""
    if "FAMILIES" not in _built:
        _built["FAMILIES"] = _families()
    found: tuple[SourceFamily, ...] = _built["FAMILIES"]
    return found


def source_kinds() -> list[type[Source]]:
    """SOURCE_KINDS, tried in order by `open_source` (remote schemes first, the catch-all
    local kind last); `register` adds to it."""
    if "SOURCE_KINDS" not in _built:
        _built["SOURCE_KINDS"] = [kind for family in families() for kind in family.sources]
    kinds: list[type[Source]] = _built["SOURCE_KINDS"]
    return kinds


def __getattr__(name: str) -> Any:
    """`sources.FAMILIES` and `sources.SOURCE_KINDS`, built when first used."""
    if name == "FAMILIES":
        return families()
    if name == "SOURCE_KINDS":
        return source_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(kind: type[Source], *, first: bool = True) -> None:
    kinds = source_kinds()
    if kind not in kinds:
        kinds.insert(0 if first else len(kinds), kind)


# The built-in families whose detection `_surely_jsonl` knows; another package here (a new
# family, asked before jsonl) turns the shortcut off.
_KNOWN = {*_ORDER, _LAST}
# What marks a path as another family's: TensorBoard event files, wandb's transaction log
# and run directories (`wandb/run-*`), `mlflow+URI` / `prom+URL` / `SCHEME://` specs.
_EVENT_FILE = "events.out.tfevents."


def _surely_jsonl(spec: str) -> bool:
    """`spec` is a path no built-in family but JSONL accepts, decided without importing
    them: an existing regular `*.jsonl` file, no scheme or `+`/`:` in the spec, not named
    like an event file, not inside a `wandb/` directory, and SOURCE_KINDS as built in
    (nothing `register`ed). Anything else asks every kind."""
    if "SOURCE_KINDS" in _built:
        return False  # built already: ask them all (and what was registered)
    if not spec.endswith(".jsonl") or ":" in spec or spec.startswith(("mlflow+", "prom+")):
        return False
    path = os.path.normpath(os.path.abspath(spec))
    parent, name = os.path.split(path)
    if name.startswith(_EVENT_FILE) or os.path.basename(parent) == "wandb":
        return False
    try:
        if not stat.S_ISREG(os.stat(spec).st_mode):
            return False
    except OSError:
        return False
    return set(_packages()) == _KNOWN


def open_source(spec: str) -> Source:
    """The source that understands `spec`, or a UsageError naming the accepted forms."""
    if _surely_jsonl(spec):
        from gatekeeper.sources.jsonl import JsonlSource

        for kind in with_plugins([JsonlSource]):
            if kind.accepts(spec):
                return kind(spec)
    kinds = with_plugins(source_kinds())
    for kind in kinds:
        if kind.accepts(spec):
            return kind(spec)
    from gatekeeper.sources.jsonl import JsonlSource

    raise UsageError(
        f"cannot open source {spec!r}: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in kinds if k is not JsonlSource)
    )


def open_live_source(spec: str) -> LiveSource:
    """The source that follows `spec` while it is written: the first registered kind that
    accepts it and can be polled (wandb), else a family's tail that waits for the run to
    appear (JSONL: a file or directory that does not exist yet)."""
    kinds = [k for k in with_plugins(source_kinds()) if issubclass(k, LiveSource)]
    for kind in kinds:
        if kind.accepts(spec):
            return kind(spec)
    for family in families():
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
    "families",
    "open_live_source",
    "open_source",
    "register",
    "source_kinds",
]
