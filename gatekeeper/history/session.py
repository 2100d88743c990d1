"""Moved to `gatekeeper.baselines` (read-before/record-after is not a store). Kept only so
the CLI's `history` command, being moved into the `gatekeeper/cli/` package in parallel,
still imports; drop it once that imports `gatekeeper.baselines`."""

from __future__ import annotations

from gatekeeper.baselines import HistoryOptions, judge, summary

__all__ = ["HistoryOptions", "judge", "summary"]
