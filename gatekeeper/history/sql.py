"""The store contract over a DB-API connection; backends supply the connection, the
placeholder style and their DDL. Two tables: `runs` (one row per run) and
`metric_values` (one row per coordinate of a run)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from gatekeeper.errors import StateError
from gatekeeper.history.base import DEFAULT_LIMIT, HistoryStore, RunRecord, StoredRun, check_finite

# Newest `limit` trusted values per step; runs.seq orders runs by when they were recorded
# (timestamps can tie within a second, an insert sequence cannot).
_BASELINE = """
SELECT step, value FROM (
  SELECT v.step AS step, v.value AS value,
         ROW_NUMBER() OVER (PARTITION BY v.step ORDER BY r.seq DESC) AS rn
  FROM metric_values v JOIN runs r ON r.seq = v.run_seq
  WHERE r.series = {p} AND r.trusted = {p}
    AND v.metric = {p} AND v.steps_key = {p} AND v.check_key = {p}
) ranked WHERE rn <= {p} ORDER BY step, rn
"""


class SqlStore(HistoryStore):
    """Shared SQL of the SQLite and PostgreSQL backends."""

    placeholder = "?"
    errors: tuple[type[BaseException], ...] = ()

    def __init__(self, conn: Any, display: str):
        self.conn = conn
        self.display = display

    @abstractmethod
    def _ddl(self) -> Sequence[str]: ...

    def _transaction(self) -> Any:
        """A context that commits on success and rolls back on error."""
        return self.conn

    def _sql(self, text: str) -> str:
        return text.format(p=self.placeholder)

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        """One transaction; backend errors become StateError naming the store."""
        try:
            with self._transaction():
                cur = self.conn.cursor()
                try:
                    yield cur
                finally:
                    cur.close()
        except self.errors as exc:
            raise StateError(f"history store {self.display}: {what} failed: {exc}") from exc

    def create_schema(self) -> None:
        with self._tx("creating the schema") as cur:
            for stmt in self._ddl():
                cur.execute(stmt)

    def record(self, run: RunRecord) -> None:
        check_finite(run)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._tx(f"recording run {run.run_id}") as cur:
            cur.execute(self._sql("SELECT seq FROM runs WHERE run_id = {p}"), (run.run_id,))
            for (seq,) in cur.fetchall():
                cur.execute(self._sql("DELETE FROM metric_values WHERE run_seq = {p}"), (seq,))
                cur.execute(self._sql("DELETE FROM runs WHERE seq = {p}"), (seq,))
            cur.execute(
                self._sql(
                    "INSERT INTO runs (run_id, series, commit_sha, trusted, created_at) "
                    "VALUES ({p}, {p}, {p}, {p}, {p})"
                ),
                (run.run_id, run.series, run.commit, run.trusted, now),
            )
            cur.execute(self._sql("SELECT seq FROM runs WHERE run_id = {p}"), (run.run_id,))
            (seq,) = cur.fetchone()
            rows = [
                (seq, c.metric, c.steps_key, c.check_key, c.step, float(v))
                for c, v in sorted(run.values.items())
            ]
            cur.executemany(
                self._sql(
                    "INSERT INTO metric_values "
                    "(run_seq, metric, steps_key, check_key, step, value) "
                    "VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
                ),
                rows,
            )

    def baseline(
        self, series: str, metric: str, steps_key: str, check_key: str, limit: int = DEFAULT_LIMIT
    ) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        with self._tx(f"reading the baseline of {metric}") as cur:
            cur.execute(self._sql(_BASELINE), (series, True, metric, steps_key, check_key, limit))
            for step, value in cur.fetchall():
                out.setdefault(int(step), []).append(float(value))
        return out

    def mark_untrusted(self, *, run_id: str | None = None, commit: str | None = None) -> int:
        if (run_id is None) == (commit is None):
            raise StateError("mark_untrusted takes exactly one of run_id or commit")
        column, value = ("run_id", run_id) if run_id is not None else ("commit_sha", commit)
        with self._tx(f"revoking trust for {column} {value}") as cur:
            cur.execute(
                self._sql(f"UPDATE runs SET trusted = {{p}} WHERE {column} = {{p}}"), (False, value)
            )
            return int(cur.rowcount)

    def runs(self, series: str | None = None, limit: int = 50) -> list[StoredRun]:
        where = "WHERE r.series = {p} " if series is not None else ""
        query = (
            "SELECT r.run_id, r.series, r.trusted, r.commit_sha, r.created_at, "
            "(SELECT COUNT(*) FROM metric_values v WHERE v.run_seq = r.seq) "
            f"FROM runs r {where}ORDER BY r.seq DESC LIMIT {{p}}"
        )
        params = (series, limit) if series is not None else (limit,)
        with self._tx("listing runs") as cur:
            cur.execute(self._sql(query), params)
            return [
                StoredRun(str(a), str(b), bool(c), d, str(e), int(f))
                for a, b, c, d, e, f in cur.fetchall()
            ]

    def close(self) -> None:
        self.conn.close()
