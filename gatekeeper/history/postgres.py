"""A shared baseline store on PostgreSQL (psycopg 3), opened by URL:
`postgresql://user@host:5432/db`. Put the password in the URL from a secret
(`--history "$HISTORY_URL"` / `GATEKEEPER_HISTORY`) or in PGPASSWORD; it is never shown.
The tables are created on first use when missing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gatekeeper.errors import StateError
from gatekeeper.history.base import redact
from gatekeeper.history.sql import SqlStore

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - psycopg ships with gatekeeper's deps
    raise StateError(
        "a PostgreSQL history store needs psycopg: pip install 'psycopg[binary]'"
    ) from exc

_DDL = (
    """CREATE TABLE IF NOT EXISTS runs (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        series TEXT NOT NULL,
        commit_sha TEXT,
        trusted BOOLEAN NOT NULL,
        created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS metric_values (
        run_seq BIGINT NOT NULL REFERENCES runs(seq),
        metric TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        check_key TEXT NOT NULL,
        step BIGINT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_seq, metric, steps_key, check_key, step))""",
    "CREATE INDEX IF NOT EXISTS runs_baseline ON runs (series, trusted, seq DESC)",
    "CREATE INDEX IF NOT EXISTS values_coordinate ON metric_values (metric, steps_key, check_key)",
    "CREATE INDEX IF NOT EXISTS runs_commit ON runs (commit_sha)",
)


class PostgresStore(SqlStore):
    placeholder = "%s"
    errors = (psycopg.Error,)

    def __init__(self, url: str):
        shown = redact(url)
        try:
            conn = psycopg.connect(url, connect_timeout=10, autocommit=True)
        except psycopg.Error as exc:
            # psycopg's message can echo the conninfo; keep only its first line, redacted.
            first = redact(
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            )
            raise StateError(f"history store {shown}: cannot connect: {first}") from None
        super().__init__(conn, shown)
        self.create_schema()

    def _transaction(self) -> Any:
        return self.conn.transaction()  # autocommit + transaction(): a real BEGIN/COMMIT

    def _ddl(self) -> Sequence[str]:
        return _DDL
