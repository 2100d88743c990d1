"""Runs a daemon `wandb:` target covers: a project's runs in a state, with any of some tags.

The listing goes through the public `wandb.Api` (credentials and server from the SDK's
own settings: WANDB_API_KEY, WANDB_BASE_URL). The SDK is imported at the first listing,
not at import: the rest of gatekeeper stays importable, and a missing SDK is one
target's visible error rather than a crash of the daemon.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gatekeeper.errors import SourceUnavailable
from gatekeeper.extras import load
from gatekeeper.sources.base import Discovery, env_number


@dataclass(frozen=True)
class ProjectRuns(Discovery):
    """Every run of `project` (ENTITY/PROJECT) in `state`, with any of `tags` if given."""

    project: str
    state: str = "running"
    tags: tuple[str, ...] = ()

    @classmethod
    def from_filter(cls, wb: Any) -> ProjectRuns:
        """From a daemon config's `wandb:` target (`project`, `state`, `tags`)."""
        return cls(project=wb.project, state=wb.state, tags=tuple(wb.tags))

    def query(self) -> dict[str, object]:
        """The wandb `runs()` filter (MongoDB-style)."""
        filters: dict[str, object] = {"state": self.state}
        if self.tags:
            filters["tags"] = {"$in": list(self.tags)}
        return filters

    def runs(self) -> list[str]:
        """`wandb://ENTITY/PROJECT/RUN_ID` of every run matching the filter."""
        wandb = load("wandb", "wandb", f"listing the runs of wandb project {self.project}")
        timeout = max(1, round(env_number("GATEKEEPER_WANDB_TIMEOUT", 20, 0.1, 3600)))
        try:
            api = wandb.Api(timeout=timeout)
            found = api.runs(self.project, filters=self.query(), per_page=100)
            return sorted(f"wandb://{self.project}/{r.id}" for r in found)
        except Exception as exc:  # the SDK raises many kinds; all mean "not listed this time"
            detail = json.dumps(str(exc))[:300]
            raise SourceUnavailable(
                f"wandb project {self.project}: cannot list runs: {detail}"
            ) from None

    def describe(self) -> str:
        tags = f", tags any of {', '.join(self.tags)}" if self.tags else ""
        return f"wandb project {self.project} (state {self.state}{tags})"
