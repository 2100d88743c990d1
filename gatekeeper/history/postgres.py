"""A shared baseline store on PostgreSQL (psycopg 3), opened by URL:
`postgresql://user@host:5432/db`. Put the password in the URL from a secret
(`--history "$HISTORY_URL"` / `GATEKEEPER_HISTORY`) or in PGPASSWORD; it is never shown.
The gk_* tables are created on first use when missing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg  # gatekeeper[postgres]: open_store asks for it before importing this

from gatekeeper.dburl import HISTORY_BOUNDS, KEEPALIVE, connect_postgres, redact
from gatekeeper.history.sql import SqlStore

_DDL = (
    """CREATE TABLE IF NOT EXISTS gk_runs (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        series TEXT NOT NULL,
        commit_sha TEXT,
        trusted BOOLEAN NOT NULL,
        created_at TEXT NOT NULL,
        n_values BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS gk_series (
        id BIGSERIAL PRIMARY KEY,
        series TEXT NOT NULL,
        metric TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        check_key TEXT NOT NULL,
        UNIQUE (series, metric, steps_key, check_key))""",
    """CREATE TABLE IF NOT EXISTS gk_points (
        series_id BIGINT NOT NULL REFERENCES gk_series(id),
        run_seq BIGINT NOT NULL REFERENCES gk_runs(seq),
        first_step BIGINT NOT NULL,
        n BIGINT NOT NULL,
        steps BYTEA,
        vals BYTEA NOT NULL,
        PRIMARY KEY (series_id, run_seq))""",
    # packed floats do not compress: skip TOAST's compression attempt
    "ALTER TABLE gk_points ALTER COLUMN vals SET STORAGE EXTERNAL",
    "CREATE INDEX IF NOT EXISTS gk_points_run ON gk_points (run_seq)",
    "CREATE INDEX IF NOT EXISTS gk_runs_series ON gk_runs (series, seq DESC)",
    "CREATE INDEX IF NOT EXISTS gk_runs_commit ON gk_runs (commit_sha)",
)


class PostgresStore(SqlStore):
    placeholder = "%s"
    errors = (psycopg.Error,)

    def __init__(self, url: str, *, migrate: bool = False):
        conn = connect_postgres(url, "history store", bounds=HISTORY_BOUNDS, **KEEPALIVE)
        super().__init__(conn, redact(url))
        try:
            self.migrated = self.create_schema(migrate=migrate)
        except BaseException:
            conn.close()
            raise

    def _transaction(self) -> Any:
        return self.conn.transaction()  # autocommit + transaction(): a real BEGIN/COMMIT

    def _ddl(self) -> Sequence[str]:
        return _DDL

    def _columns(self, cur: Any, table: str) -> set[str]:
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
        )
        return {str(row[0]) for row in cur.fetchall()}
