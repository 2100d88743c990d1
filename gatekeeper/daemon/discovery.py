"""Which runs a target covers right now: one source, a glob, or a wandb project filter.

Discovery runs every `poll.discovery_interval`; a run found is watched until its source
says it ended. The wandb listing goes through the public `wandb.Api` (credentials and
server from the SDK's own settings: WANDB_API_KEY, WANDB_BASE_URL).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable

from gatekeeper.daemon.config import Target, WandbFilter
from gatekeeper.errors import SourceUnavailable

Lister = Callable[[], list[str]]


def lister(target: Target) -> Lister:
    """A function listing the run keys (SOURCE strings) the target covers now."""
    if target.source is not None:
        source = target.source
        return lambda: [source]
    if target.glob is not None:
        pattern = target.glob
        return lambda: sorted(glob.glob(pattern))
    family = next((f for f in target.family_filters() if f is not None), None)
    if family is not None:
        return family.runs  # type: ignore[no-any-return]
    assert target.wandb is not None
    wb = target.wandb
    return lambda: wandb_runs(wb)


def describe(target: Target) -> str:
    family = next((f for f in target.family_filters() if f is not None), None)
    if family is not None:
        return str(family.describe())
    if target.wandb is not None:
        w = target.wandb
        tags = f", tags any of {', '.join(w.tags)}" if w.tags else ""
        return f"wandb project {w.project} (state {w.state}{tags})"
    return target.source or target.glob or ""


def wandb_filters(wb: WandbFilter) -> dict[str, object]:
    """The wandb `runs()` filter (MongoDB-style) for a target."""
    filters: dict[str, object] = {"state": wb.state}
    if wb.tags:
        filters["tags"] = {"$in": list(wb.tags)}
    return filters


def wandb_runs(wb: WandbFilter) -> list[str]:
    """`wandb://ENTITY/PROJECT/RUN_ID` of every run matching the filter."""
    try:
        import wandb
    except ImportError as exc:
        raise SourceUnavailable(
            f"wandb project {wb.project}: needs the wandb SDK ({exc})"
        ) from None
    timeout = max(1, round(float(os.environ.get("GATEKEEPER_WANDB_TIMEOUT", "20"))))
    try:
        runs = wandb.Api(timeout=timeout).runs(wb.project, filters=wandb_filters(wb), per_page=100)
        return sorted(f"wandb://{wb.project}/{r.id}" for r in runs)
    except Exception as exc:  # the SDK raises many kinds; all mean "not listed this time"
        detail = json.dumps(str(exc))[:300]
        raise SourceUnavailable(f"wandb project {wb.project}: cannot list runs: {detail}") from None
