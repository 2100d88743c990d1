"""Which runs a target covers right now: one source, or what a source family lists.

Discovery runs every `poll.discovery_interval`; a run found is watched until its source
says it ended. A `glob:` or `wandb:` target is listed by the family that registered that
target key (`SourceFamily.target_key`); this module only asks.
"""

from __future__ import annotations

from collections.abc import Callable

from gatekeeper.daemon.config import Target
from gatekeeper.extras import require
from gatekeeper.sources import FAMILIES, family_of
from gatekeeper.sources.base import Discovery

Lister = Callable[[], list[str]]


def discovery(target: Target) -> Discovery | None:
    """The family's listing for a `glob:`/`wandb:` target; None for a single `source:`.
    A family whose extra is not installed stops the daemon here, at start-up (and
    `--check-config`), with the line naming it, not at every listing."""
    for family in FAMILIES:
        key = family.target_key
        value = target.filter_of(key) if key else None
        if value is not None and family.discovery is not None:
            if family.extra is not None:
                require(family.extra, f"a daemon target's {key}:")
            return family.discovery(value)
    return None


def lister(target: Target) -> Lister:
    """A function listing the run keys (SOURCE strings) the target covers now."""
    found = discovery(target)
    if found is not None:
        return found.runs
    source = target.source
    assert source is not None  # the config allows exactly one of source, glob, wandb
    family = family_of(source)
    if family is not None and family.extra is not None:
        require(family.extra, f"a daemon target's source {source!r}")
    return lambda: [source]


def describe(target: Target) -> str:
    found = discovery(target)
    return found.describe() if found is not None else target.source or ""
