"""Baseline stores for drift checks: one contract (`base.py`), SQLite by default, PostgreSQL
by URL for teams sharing one baseline across CI machines."""

from __future__ import annotations

from gatekeeper.history.base import (
    Baselines,
    Coordinate,
    HistoryStore,
    RuleBaseline,
    RunRecord,
    StoredRun,
)


def open_store(url: str) -> HistoryStore:
    """The store a URL names: `postgresql://...` / `postgres://...`, or `sqlite:///path`
    (a plain file path is SQLite too)."""
    if url.startswith(("postgresql://", "postgres://")):
        from gatekeeper.history.postgres import PostgresStore

        return PostgresStore(url)
    from gatekeeper.history.sqlite import SqliteStore

    return SqliteStore(url)


__all__ = [
    "Baselines",
    "Coordinate",
    "HistoryStore",
    "RuleBaseline",
    "RunRecord",
    "StoredRun",
    "open_store",
]
