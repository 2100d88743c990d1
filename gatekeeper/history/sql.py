"""The store contract over a DB-API connection; backends supply the connection, the
placeholder style and their DDL.

Tables are namespaced `gk_*` so they can share one database with miles' own
`runs` / `metric_values`:
- `gk_runs`: one row per run (series, trust, provenance, insert order `seq`);
- `gk_series`: one row per (series, metric, steps_key, check_key), the id a baseline
  read keys on;
- `gk_points`: one row per run and series id, the run's values as packed little-endian
  arrays (float64 values; int64 steps, or none when the steps are contiguous).

gatekeeper's first layout (`runs` with `seq`/`series`, `metric_values` with `run_seq`)
is never read or reset silently: opening such a store is refused until
`gatekeeper history migrate` converts it (the old tables are renamed `gk_legacy_*`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import numpy as np

from gatekeeper.errors import StateError, one_line
from gatekeeper.history import keys
from gatekeeper.history.base import (
    CoordKey,
    Enough,
    HistoryStore,
    Points,
    RunRecord,
    StoredRun,
    check_record,
)
from gatekeeper.model import STEP_MAX, STEP_MIN

LAYOUT = "2"


def pack(steps: np.ndarray, values: np.ndarray) -> tuple[int, int, bytes | None, bytes]:
    """(first_step, n, steps blob or None when contiguous, values blob)."""
    n = int(steps.size)
    first = int(steps[0]) if n else 0
    contiguous = n == 0 or int(steps[-1]) - first == n - 1  # strictly increasing ints
    blob = None if contiguous else np.asarray(steps, dtype="<i8").tobytes()
    return first, n, blob, np.asarray(values, dtype="<f8").tobytes()


BLOB = (bytes, bytearray, memoryview)  # what sqlite3 and psycopg hand back for a BLOB/BYTEA


def unpack(first: Any, n: Any, steps: Any, vals: Any) -> Points:
    """A row's points, as `pack` wrote them; ValueError saying how the row is not one (a
    damaged or hand-edited store: sqlite keeps a text in an INTEGER or BLOB column)."""
    whole = all(isinstance(x, int) and not isinstance(x, bool) for x in (first, n))
    if not whole or n < 0 or not STEP_MIN <= first <= STEP_MAX - max(n, 1) + 1:
        raise ValueError(f"first_step {first!r} and n {n!r} are not a range of int64 steps")
    if not isinstance(vals, BLOB) or len(vals) != 8 * n:
        raise ValueError(f"vals is not {n} float64 values")
    values = np.frombuffer(bytes(vals), dtype="<f8").astype(np.float64)
    if steps is None:
        return np.arange(first, first + n, dtype=np.int64), values
    if not isinstance(steps, BLOB) or len(steps) != 8 * n:
        raise ValueError(f"steps is not {n} int64 steps")
    out = np.frombuffer(bytes(steps), dtype="<i8").astype(np.int64)
    if n > 1 and not bool(np.all(out[1:] > out[:-1])):
        raise ValueError("its steps do not increase")
    return out, values


_ROWS = """
SELECT p.run_seq, r.run_id, p.first_step, p.n, p.steps, p.vals
FROM gk_points p JOIN gk_runs r ON r.seq = p.run_seq
WHERE p.series_id = {p} AND r.trusted = {p} AND p.run_seq < {p}
ORDER BY p.run_seq DESC LIMIT {p}
"""


class SqlStore(HistoryStore):
    """Shared SQL of the SQLite and PostgreSQL backends."""

    placeholder = "?"
    errors: tuple[type[BaseException], ...] = ()
    migrated = 0  # runs converted from the first layout when opened with migrate=True

    def __init__(self, conn: Any, display: str):
        self.conn = conn
        self.display = display

    @abstractmethod
    def _ddl(self) -> Sequence[str]: ...

    @abstractmethod
    def _columns(self, cur: Any, table: str) -> set[str]:
        """Column names of `table`, empty when it does not exist."""

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

    def _legacy(self, cur: Any) -> bool:
        """gatekeeper's first layout is present (miles' `runs` has no `series`)."""
        return {"seq", "series"} <= self._columns(cur, "runs") and "run_seq" in self._columns(
            cur, "metric_values"
        )

    def create_schema(self, *, migrate: bool = False) -> int:
        """Create the tables; with `migrate`, convert a first-layout store (returns how
        many runs were converted). Without it such a store is refused."""
        with self._tx("creating the schema") as cur:
            legacy = self._legacy(cur)
            if legacy and not migrate:
                raise StateError(
                    f"history store {self.display} has gatekeeper's old layout (tables runs, "
                    "metric_values); convert it once with `gatekeeper history migrate "
                    "--history URL` (the old tables are kept as gk_legacy_*)"
                )
            # Once the tables exist, no DDL at all: a role that may only read and write
            # them (miles' Neon application role is DML-only) opens the store too.
            if not all(self._columns(cur, t) for t in ("gk_runs", "gk_series", "gk_points")):
                for stmt in self._ddl():
                    cur.execute(stmt)
            if not legacy:
                return 0
            return self._migrate(cur)

    def _migrate(self, cur: Any) -> int:
        cur.execute(
            "SELECT seq, run_id, series, commit_sha, trusted, created_at FROM runs ORDER BY seq"
        )
        old_runs = cur.fetchall()
        for seq, run_id, series, commit, trusted, created_at in old_runs:
            cur.execute(
                self._sql(
                    "SELECT metric, steps_key, check_key, step, value FROM metric_values "
                    "WHERE run_seq = {p} ORDER BY metric, steps_key, check_key, step"
                ),
                (seq,),
            )
            grouped: dict[CoordKey, dict[int, float]] = {}
            for metric, sk, ck, step, value in cur.fetchall():
                key = (metric, *keys.from_legacy(sk, ck))
                grouped.setdefault(key, {})[int(step)] = float(value)  # type: ignore[arg-type]
            points = {
                k: (
                    np.array(sorted(d), dtype=np.int64),
                    np.array([d[s] for s in sorted(d)], dtype=np.float64),
                )
                for k, d in grouped.items()
            }
            rec = RunRecord(
                str(run_id), str(series), bool(trusted), points, commit, str(created_at)
            )
            check_record(rec)
            self._insert(cur, rec)
        cur.execute("ALTER TABLE metric_values RENAME TO gk_legacy_metric_values")
        cur.execute("ALTER TABLE runs RENAME TO gk_legacy_runs")
        return len(old_runs)

    def record(self, run: RunRecord) -> None:
        check_record(run)
        with self._tx(f"recording run {run.run_id}") as cur:
            self._insert(cur, run)

    def record_many(self, runs: Sequence[RunRecord]) -> None:
        """Write runs in order, all or none (an import)."""
        for run in runs:
            check_record(run)
        with self._tx(f"writing {len(runs)} run(s)") as cur:
            for run in runs:
                self._insert(cur, run)

    def _insert(self, cur: Any, run: RunRecord) -> None:
        now = run.created_at or datetime.now(timezone.utc).isoformat(timespec="microseconds")
        cur.execute(self._sql("SELECT seq FROM gk_runs WHERE run_id = {p}"), (run.run_id,))
        for (seq,) in cur.fetchall():
            cur.execute(self._sql("DELETE FROM gk_points WHERE run_seq = {p}"), (seq,))
            cur.execute(self._sql("DELETE FROM gk_runs WHERE seq = {p}"), (seq,))
        cur.execute(
            self._sql(
                "INSERT INTO gk_runs (run_id, series, commit_sha, trusted, created_at, n_values) "
                "VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
            ),
            (run.run_id, run.series, run.commit, run.trusted, now, run.n_values),
        )
        cur.execute(self._sql("SELECT seq FROM gk_runs WHERE run_id = {p}"), (run.run_id,))
        (seq,) = cur.fetchone()
        rows = []
        for key, (steps, values) in sorted(run.points.items(), key=lambda kv: kv[0]):
            if not steps.size:
                continue
            sid = self._series_id(cur, run.series, key, create=True)
            rows.append((sid, seq, *pack(steps, values)))
        cur.executemany(
            self._sql(
                "INSERT INTO gk_points (series_id, run_seq, first_step, n, steps, vals) "
                "VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
            ),
            rows,
        )

    def _series_id(self, cur: Any, series: str, key: CoordKey, *, create: bool) -> int | None:
        args = (series, *key)
        select = self._sql(
            "SELECT id FROM gk_series WHERE series = {p} AND metric = {p} AND steps_key = {p} "
            "AND check_key = {p}"
        )
        cur.execute(select, args)
        row = cur.fetchone()
        if row is not None or not create:
            return None if row is None else int(row[0])
        cur.execute(
            self._sql(
                "INSERT INTO gk_series (series, metric, steps_key, check_key) "
                "VALUES ({p}, {p}, {p}, {p})"
            ),
            args,
        )
        cur.execute(select, args)
        return int(cur.fetchone()[0])

    def _rows(self, series: str, key: CoordKey, enough: Enough) -> list[Points]:
        rows: list[Points] = []
        with self._tx(f"reading the baseline of {key[0]}") as cur:
            sid = self._series_id(cur, series, key, create=False)
            if sid is None:
                return rows
            before = 1 << 62
            while True:
                # Newest first in batches of `limit` runs, in one transaction.
                cur.execute(self._sql(_ROWS), (sid, True, before, enough.limit))
                batch = cur.fetchall()
                for run_seq, run_id, *row in batch:
                    before = int(run_seq)
                    rows.append(self._unpacked(run_id, key, row))
                    enough.add(rows[-1][0])
                if len(batch) < enough.limit or enough.met():
                    return rows

    def _unpacked(self, run_id: str, key: CoordKey, row: list[Any]) -> Points:
        try:
            return unpack(*row)
        except ValueError as exc:
            run = one_line(str(run_id))
            raise StateError(
                f"history store {self.display}: run {run}'s baseline of {one_line(key[0])} is "
                f"damaged ({exc}); restore the store from a backup, or leave that run out: "
                f"gatekeeper history mark-untrusted --run-id {run} --history {self.display}"
            ) from None

    def mark_untrusted(self, *, run_id: str | None = None, commit: str | None = None) -> int:
        if (run_id is None) == (commit is None):
            raise StateError("mark_untrusted takes exactly one of run_id or commit")
        column, value = ("run_id", run_id) if run_id is not None else ("commit_sha", commit)
        with self._tx(f"revoking trust for {column} {value}") as cur:
            cur.execute(
                self._sql(
                    f"UPDATE gk_runs SET trusted = {{p}} WHERE {column} = {{p}} AND trusted = {{p}}"
                ),
                (False, value, True),
            )
            return int(cur.rowcount)

    def runs(self, series: str | None = None, limit: int = 50) -> list[StoredRun]:
        where = "WHERE series = {p} " if series is not None else ""
        query = (
            "SELECT run_id, series, trusted, commit_sha, created_at, n_values "
            f"FROM gk_runs {where}ORDER BY seq DESC LIMIT {{p}}"
        )
        params = (series, limit) if series is not None else (limit,)
        with self._tx("listing runs") as cur:
            cur.execute(self._sql(query), params)
            return [
                StoredRun(str(a), str(b), bool(c), d, str(e), int(f))
                for a, b, c, d, e, f in cur.fetchall()
            ]

    def newest(self, series: str) -> str | None:
        """created_at of the newest run of `series`, if any (import keeps order by it)."""
        with self._tx("reading the newest run") as cur:
            cur.execute(
                self._sql("SELECT MAX(created_at) FROM gk_runs WHERE series = {p}"), (series,)
            )
            row = cur.fetchone()
            return None if row is None or row[0] is None else str(row[0])

    def has_run(self, run_id: str) -> bool:
        with self._tx("looking up a run") as cur:
            cur.execute(self._sql("SELECT 1 FROM gk_runs WHERE run_id = {p}"), (run_id,))
            return cur.fetchone() is not None

    def close(self) -> None:
        self.conn.close()
