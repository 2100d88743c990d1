"""The default baseline store: one SQLite file (`sqlite:///path` or a plain path)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from gatekeeper.dburl import sqlite_path
from gatekeeper.errors import StateError
from gatekeeper.history.sql import SqlStore

_DDL = (
    """CREATE TABLE IF NOT EXISTS gk_runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL UNIQUE,
        series TEXT NOT NULL,
        commit_sha TEXT,
        trusted INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        n_values INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS gk_series (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        series TEXT NOT NULL,
        metric TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        check_key TEXT NOT NULL,
        UNIQUE (series, metric, steps_key, check_key))""",
    """CREATE TABLE IF NOT EXISTS gk_points (
        series_id INTEGER NOT NULL REFERENCES gk_series(id),
        run_seq INTEGER NOT NULL REFERENCES gk_runs(seq),
        first_step INTEGER NOT NULL,
        n INTEGER NOT NULL,
        steps BLOB,
        vals BLOB NOT NULL,
        PRIMARY KEY (series_id, run_seq))""",
    "CREATE INDEX IF NOT EXISTS gk_points_run ON gk_points (run_seq)",
    "CREATE INDEX IF NOT EXISTS gk_runs_series ON gk_runs (series, seq DESC)",
    "CREATE INDEX IF NOT EXISTS gk_runs_commit ON gk_runs (commit_sha)",
)


class SqliteStore(SqlStore):
    placeholder = "?"
    errors = (sqlite3.Error,)

    def __init__(self, url: str, *, migrate: bool = False):
        path = sqlite_path(url)
        if not path:
            raise StateError(
                f"history store {url!r}: no file path; use sqlite:///path/to/history.db"
            )
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise StateError(f"history store {path}: directory {parent} does not exist")
        try:
            conn = sqlite3.connect(path, timeout=30)
        except sqlite3.Error as exc:
            raise StateError(f"history store {path}: cannot open: {exc}") from exc
        super().__init__(conn, path)
        try:
            self.migrated = self.create_schema(migrate=migrate)
        except BaseException:
            conn.close()
            raise

    def _ddl(self) -> Sequence[str]:
        return _DDL

    def _columns(self, cur: Any, table: str) -> set[str]:
        cur.execute(f"PRAGMA table_info({table})")
        return {str(row[1]) for row in cur.fetchall()}
