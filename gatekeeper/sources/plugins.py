"""Source kinds from other packages: the `gatekeeper.sources` entry point, through the
one registry every pluggable kind uses (a thin adapter over SOURCE_KINDS).

A plug-in's kinds are tried before the built-in ones (as `sources.register` does): a
built-in JSONL kind accepts any local path, so it must come last.
"""

from __future__ import annotations

from gatekeeper.registry import Registry, subclass_of
from gatekeeper.sources.base import Source

# Built-ins stay in SOURCE_KINDS (their order matters); this holds only added kinds.
SOURCES: Registry[type[Source]] = Registry("source", dict, subclass_of(Source, named=False))


def with_plugins(builtin: list[type[Source]]) -> list[type[Source]]:
    """Every source kind in the order `open_source` tries them: plug-ins, then built-ins."""
    added = [k for k in SOURCES.all().values() if k not in builtin]
    return [*added, *builtin]
