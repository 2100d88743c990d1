"""The default baseline store: one SQLite file (`sqlite:///path` or a plain path)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from gatekeeper.errors import StateError
from gatekeeper.history.sql import SqlStore

_DDL = (
    """CREATE TABLE IF NOT EXISTS runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL UNIQUE,
        series TEXT NOT NULL,
        commit_sha TEXT,
        trusted INTEGER NOT NULL,
        created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS metric_values (
        run_seq INTEGER NOT NULL REFERENCES runs(seq),
        metric TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        check_key TEXT NOT NULL,
        step INTEGER NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_seq, metric, steps_key, check_key, step))""",
    "CREATE INDEX IF NOT EXISTS runs_baseline ON runs (series, trusted, seq DESC)",
    "CREATE INDEX IF NOT EXISTS values_coordinate ON metric_values (metric, steps_key, check_key)",
    "CREATE INDEX IF NOT EXISTS runs_commit ON runs (commit_sha)",
)


def sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        return url[len("sqlite://") :]
    if url.startswith("sqlite:"):
        return url[len("sqlite:") :]
    return url


class SqliteStore(SqlStore):
    placeholder = "?"
    errors = (sqlite3.Error,)

    def __init__(self, url: str):
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
        self.create_schema()

    def _ddl(self) -> Sequence[str]:
        return _DDL
