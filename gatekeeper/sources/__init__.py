"""Run sources: one package per family, opened from a SOURCE string by `open_source`.

Every package here with a `KIND` (a `SourceFamily` stating its Source and LiveSource
classes, annotator and discovery) is a source family; `base.py` states the contract they
implement. Adding a family is adding its package.

One detection pass picks the kind for a SOURCE string: each family package answers for
itself, through its `source_for(spec)` (the kind that reads `spec`, or None) when it has
one, else through its KIND's sources' `accepts`. A built-in family answers by the
SOURCE's scheme first (`wandb://`, `tb://`, `mlflow+...`, `prom+http://`): a SOURCE of
another family's scheme imports none of its modules, a local path only the `accepts` of
the local families (a file name, a `stat`). Families are asked by package name; one
whose package says `FALLBACK = True` (JSONL: any local path) only after every other has
declined. Plug-in kinds (the `gatekeeper.sources` entry point, `register`) are asked
before all of them. A family's optional libraries (`gatekeeper[wandb]`, ...) are asked
for when its source is opened and imported when it is read (gatekeeper/extras.py), so
a JSONL check imports none of them.

`FAMILIES` (every KIND, in that order) and `SOURCE_KINDS` (their sources) are built when
first used, for callers that list or try every kind (`gatekeeper sources`, annotate, the
daemon's discovery).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from types import ModuleType
from typing import Any

from gatekeeper.errors import UsageError, shown_url
from gatekeeper.sources.base import LiveSource, RunOverrides, Source, SourceFamily
from gatekeeper.sources.plugins import with_plugins


@cache
def _family_packages() -> tuple[ModuleType, ...]:
    """Every family package, imported (a package's import is cheap: its KIND is lazy), in
    the order the detection pass asks them: by name, the fallback family last."""
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg)
    found = [importlib.import_module(f"{__name__}.{name}") for name in names]
    found = [p for p in found if _declares_kind(p)]
    return tuple(sorted(found, key=lambda p: bool(getattr(p, "FALLBACK", False))))


def _declares_kind(package: ModuleType) -> bool:
    """A KIND bound, or declared for the package's lazy `__getattr__` (reading it would
    build it: import the family's modules)."""
    return "KIND" in vars(package) or "KIND" in vars(package).get("__annotations__", {})


def _source_for(package: ModuleType, spec: str) -> type[Source] | None:
    answer = getattr(package, "source_for", None)
    if answer is not None:
        found: type[Source] | None = answer(spec)
        return found
    return next((kind for kind in package.KIND.sources if kind.accepts(spec)), None)


def _detect(spec: str) -> tuple[ModuleType, type[Source]] | None:
    """The first family package (by name, the fallback last) with a kind for `spec`."""
    for package in _family_packages():
        kind = _source_for(package, spec)
        if kind is not None:
            return package, kind
    return None


def family_of(spec: str) -> SourceFamily | None:
    """The family that reads `spec`, or None."""
    found = _detect(spec)
    family: SourceFamily | None = found[0].KIND if found is not None else None
    return family


# Declared, not bound: the module's __getattr__ builds them when first asked for.
FAMILIES: tuple[SourceFamily, ...]
SOURCE_KINDS: list[type[Source]]
_registered: list[type[Source]] = []  # `register`ed kinds, asked before the families


def families() -> tuple[SourceFamily, ...]:
    """FAMILIES: every family's KIND, in the detection pass's order."""
    return tuple(package.KIND for package in _family_packages())


def source_kinds() -> list[type[Source]]:
    """SOURCE_KINDS: the `register`ed kinds, then every family's sources in order."""
    return [*_registered, *(kind for family in families() for kind in family.sources)]


def __getattr__(name: str) -> Any:
    """`sources.FAMILIES` and `sources.SOURCE_KINDS`, built when first used."""
    if name == "FAMILIES":
        return families()
    if name == "SOURCE_KINDS":
        return source_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(kind: type[Source], *, first: bool = True) -> None:
    """Add a source kind from outside (tests, notebooks): asked before every family."""
    if kind not in _registered:
        _registered.insert(0 if first else len(_registered), kind)


def _added() -> list[type[Source]]:
    """Plug-in kinds (entry points) and `register`ed ones: asked before the families."""
    return with_plugins(list(_registered))


def named(spec: str) -> str:
    """`spec`, or a UsageError when it names nothing (`""`, `file://`, `tensorboard://`):
    read as the working directory, it was a run of no metrics or a wait without end."""
    rest = spec.split("://", 1)[1] if "://" in spec else spec
    if not rest.strip():
        raise UsageError(f"source {spec!r} names no run: give its file, directory or URL "
                         "(gatekeeper sources lists the forms)")
    return spec


def open_source(spec: str) -> Source:
    """The source that understands `spec`, or a UsageError naming the accepted forms."""
    named(spec)
    for kind in _added():
        if kind.accepts(spec):
            return kind(spec)
    found = _detect(spec)
    if found is not None:
        return found[1](spec)
    raise UsageError(
        f"cannot open source {shown_url(spec)!r}: expected a JSONL file or directory"
        + "".join(f", {k.kind}" for k in with_plugins(source_kinds()) if not _is_jsonl(k))
    )


def _is_jsonl(kind: type[Source]) -> bool:
    from gatekeeper.sources.jsonl import JsonlSource

    return kind is JsonlSource


def open_live_source(spec: str) -> LiveSource:
    """The source that follows `spec` while it is written: a kind that accepts it and can
    be polled (wandb), else its family's tail that waits for the run to appear (JSONL: a
    file or directory that does not exist yet)."""
    named(spec)
    family = family_of(spec)
    found = family.sources + family.live_sources if family is not None else ()
    for kind in [*_added(), *found]:
        if issubclass(kind, LiveSource) and kind.accepts(spec):
            return kind(spec)
    kinds = [k for k in with_plugins(source_kinds()) if issubclass(k, LiveSource)]
    raise UsageError(
        f"cannot follow source {shown_url(spec)!r} live: expected a JSONL file or directory"
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
    "family_of",
    "open_live_source",
    "open_source",
    "register",
    "source_kinds",
]
