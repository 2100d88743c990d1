"""Local runs a daemon `glob:` target covers: every path the pattern matches now.

A match may be a JSONL record, a directory of records or a wandb run directory: the
daemon opens each with `open_live_source`, which picks the family. The glob lives with
the JSONL family because that is the catch-all for local paths.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass

from gatekeeper.sources.base import Discovery


@dataclass(frozen=True)
class GlobRuns(Discovery):
    """The paths matching `pattern`, re-expanded at each discovery."""

    pattern: str

    def runs(self) -> list[str]:
        return sorted(glob.glob(self.pattern))

    def describe(self) -> str:
        return self.pattern
