"""Baseline stores for drift checks: one contract (`base.py`), SQLite by default, PostgreSQL
by URL for teams sharing one baseline across CI machines."""

from __future__ import annotations

from gatekeeper.dburl import is_postgres, parse
from gatekeeper.errors import UsageError
from gatekeeper.history.base import (
    Baselines,
    Coordinate,
    HistoryStore,
    RuleBaseline,
    RunRecord,
    StoredRun,
)
from gatekeeper.history.sql import SqlStore


def open_store(url: str, *, migrate: bool = False) -> SqlStore:
    """The store a URL names: `postgresql://...` / `postgres://...`, or `sqlite:///path`
    (a plain file path is SQLite too). A store of gatekeeper's first layout is refused
    unless `migrate` (then it is converted in one transaction). Another scheme, or a
    `sqlite://HOST` URL, is a UsageError naming what is accepted (`dburl.parse`)."""
    try:
        parse(url)
    except ValueError as exc:
        raise UsageError(f"history store {exc}") from None
    if is_postgres(url):
        from gatekeeper.extras import require

        require("postgres", "a PostgreSQL history store")
        from gatekeeper.history.postgres import PostgresStore

        return PostgresStore(url, migrate=migrate)
    from gatekeeper.history.sqlite import SqliteStore

    return SqliteStore(url, migrate=migrate)


__all__ = [
    "Baselines",
    "Coordinate",
    "HistoryStore",
    "RuleBaseline",
    "RunRecord",
    "SqlStore",
    "StoredRun",
    "is_postgres",
    "open_store",
]
