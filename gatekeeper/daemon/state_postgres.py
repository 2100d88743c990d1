"""The daemon's state on PostgreSQL (`state: postgresql://USER@HOST:PORT/DB`), shared by
replicas. The queries are `state.SqlState`'s; this module supplies the connection, the
schema and the transaction.

Tables are prefixed `gkd_` so the state can share a database with the history store
(`gk_*`) and miles' own tables. The first daemon to open an empty database creates them,
under a transaction-scoped advisory lock so that replicas starting together do not race
on the DDL; afterwards opening runs no DDL, so a role with only SELECT/INSERT/UPDATE/
DELETE on the tables (and USAGE on their sequence) works.

A connection that breaks (the server restarted, the network dropped) is reopened on the
next use; until then every operation fails. TCP keepalives bound how long a dead peer
can hold a call. `reachable()` (`/readyz`) asks the server on a connection of its own,
so a poll or lease call stuck on the shared one does not hold it, and answers within
`PROBE_DEADLINE` seconds: a probe still waiting then is "not reachable".
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg  # gatekeeper[postgres]: dburl.connect_postgres asks for it first

from gatekeeper import dburl
from gatekeeper.daemon.lease import NOW, LeaseLost, Leases
from gatekeeper.daemon.state import SqlState

PROBE_DEADLINE = 1.5  # seconds /readyz waits for the store to answer
# A fixed advisory-lock key: "gkd-schema" as an int64.
SCHEMA_LOCK = 0x676B642D736368

_DDL = [
    "CREATE TABLE {t}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE {t}runs (
        key TEXT PRIMARY KEY, target TEXT NOT NULL, cursor TEXT, state TEXT,
        fingerprint TEXT, verdict TEXT, status TEXT, points BIGINT NOT NULL DEFAULT 0,
        polls BIGINT NOT NULL DEFAULT 0, ended INTEGER NOT NULL DEFAULT 0,
        updated DOUBLE PRECISION)""",
    """CREATE TABLE {t}rules (
        run TEXT NOT NULL, policy TEXT NOT NULL, rule TEXT NOT NULL, severity TEXT NOT NULL,
        status TEXT NOT NULL, since DOUBLE PRECISION NOT NULL, candidate TEXT,
        candidate_count INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run, policy, rule))""",
    """CREATE TABLE {t}alert_state (
        run TEXT NOT NULL, policy TEXT NOT NULL, rule TEXT NOT NULL, channel TEXT NOT NULL,
        firing INTEGER NOT NULL, last_sent DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run, policy, rule, channel))""",
    # owner: the replica whose poll committed the alert (set per connection, see
    # lease_as), so a pending alert is delivered by it alone until it is gone
    """CREATE TABLE {t}alerts (
        id BIGSERIAL PRIMARY KEY, channel TEXT NOT NULL, payload TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, outcome TEXT NOT NULL DEFAULT 'pending',
        done DOUBLE PRECISION, detail TEXT,
        owner TEXT DEFAULT nullif(current_setting('gatekeeper.replica', true), ''))""",
    "CREATE INDEX {t}alerts_pending ON {t}alerts (outcome) WHERE outcome = 'pending'",
    """CREATE TABLE {t}leases (
        run TEXT PRIMARY KEY, target TEXT NOT NULL, holder TEXT,
        expires DOUBLE PRECISION NOT NULL DEFAULT 0)""",
    "CREATE INDEX {t}leases_holder ON {t}leases (holder)",
    "CREATE TABLE {t}replicas (replica TEXT PRIMARY KEY, seen DOUBLE PRECISION NOT NULL)",
]


class PostgresState(SqlState):
    placeholder = "%s"
    prefix = "gkd_"
    errors = (psycopg.Error,)

    def __init__(self, url: str, *, create: bool = True):
        self._url = url
        self._probe = Probe(self._probe_once, PROBE_DEADLINE)
        super().__init__(self._connect(), dburl.redact(url))
        try:
            self.exists = self._open(create=create)
        except psycopg.Error as exc:
            self.conn.close()
            raise self._failure("opening", exc) from None
        except BaseException:
            self.conn.close()
            raise

    replica: str | None = None  # set by lease_as: this process is one of the replicas
    ttl = 0.0

    def _connect(self) -> Any:
        conn = dburl.connect_postgres(self._url, "state store", **dburl.KEEPALIVE)
        if self.replica is not None:
            self._as_replica(conn)
        return conn

    def lease_as(self, replica: str, ttl: float) -> Leases:
        """From now on this store's commits are fenced by `replica`'s leases."""
        self.replica, self.ttl = replica, ttl
        with self._read() as cur:
            self._as_replica(cur)
        return Leases(self, replica, ttl)

    def _as_replica(self, cur: Any) -> None:
        """This session as the replica's (`cur`: a cursor or the connection): its name,
        which the alerts' owner and `pg_stat_activity.application_name` show, and three
        bounds kept by the server:
        - a transaction left open for a lease period ends the session. A replica frozen
          inside one (SIGSTOP, a paused VM, a network lost with the socket still open)
          kept its row locks for good, and the others' takeover, which skips locked
          leases, never took those runs;
        - a statement waits a lease period at most for a lock (`lock_timeout`). A row
          held by another session (an operator's, a migration) made a commit wait for as
          long, and the daemon's stop with it (the scheduler waits for the polls in
          flight); the poll now fails, counted, and the run is polled again;
        - a statement runs two lease periods at most (`statement_timeout`; longer than
          the lock wait, which is then reported as one). A commit is past its fence: it
          holds the run's lease row, which takeover skips, so a commit stalled on the
          server (a trigger, an I/O stall) kept the run from every replica, and a worker
          and the stop waiting; it now fails like a lock wait.
        Every setting is one a role with only DML rights may make."""
        assert self.replica is not None
        lease = max(1, round(self.ttl * 1000))  # milliseconds
        cur.execute(
            "SELECT set_config('gatekeeper.replica', %s, false), "
            "set_config('application_name', %s, false), "
            "set_config('idle_in_transaction_session_timeout', %s, false), "
            "set_config('lock_timeout', %s, false), "
            "set_config('statement_timeout', %s, false)",
            (self.replica, f"gatekeeper {self.replica}"[:63], str(lease), str(lease),
             str(2 * lease)),  # fmt: skip
        )

    def _fence(self, cur: Any, key: str) -> None:
        """Renew the run's lease in the commit's transaction, or refuse the commit: a
        replica whose lease expired writes nothing more for that run."""
        if self.replica is None:
            return
        cur.execute(
            f"UPDATE gkd_leases SET expires = {NOW} + %s "
            f"WHERE run = %s AND holder = %s AND expires > {NOW} RETURNING 1",
            (self.ttl, key, self.replica),
        )
        if cur.fetchone() is None:
            raise LeaseLost(f"run {key}: replica {self.replica} no longer holds its lease")

    def _ensure(self) -> None:
        if self.conn.closed or self.conn.broken:
            self.conn = self._connect()  # a StateError while the server is away

    def _transaction(self) -> Any:
        return self.conn.transaction()  # autocommit + transaction(): a real BEGIN/COMMIT

    def _schema_lock(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))

    def _tables(self, cur: Any) -> set[str]:
        cur.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name LIKE 'gkd\\_%%'"
        )
        return {str(r[0]) for r in cur.fetchall()}

    def _schema(self) -> list[str]:
        return _DDL

    _probe_conn: Any = None

    def reachable(self) -> bool:
        """One round trip to the server on the probe's own connection, bounded."""
        return self._probe()

    def _probe_once(self) -> bool:
        conn = self._probe_conn
        if conn is None or conn.closed or conn.broken:
            # libpq's shortest connect timeout is 2 s; the probe's deadline is shorter
            options = {**dburl.KEEPALIVE, "connect_timeout": 2}
            conn = dburl.connect_postgres(self._url, "state store", **options)
            self._probe_conn = conn
        conn.execute("SELECT 1")
        return True

    def close(self) -> None:
        super().close()
        if self._probe_conn is not None:
            with contextlib.suppress(Exception):  # a probe may still be waiting on it
                self._probe_conn.close()


class Probe:
    """A check answered within `deadline` seconds. The check runs on a thread of its
    own, one at a time; a caller waits for the one in flight (or starts one) at most
    `deadline`, and a check not done by then, or failed, is False."""

    def __init__(self, check: Callable[[], bool], deadline: float):
        self.check, self.deadline = check, deadline
        self._lock = threading.Lock()
        self._flight: _Attempt | None = None

    def __call__(self) -> bool:
        with self._lock:
            attempt = self._flight
            if attempt is None:
                attempt = self._flight = _Attempt()
                threading.Thread(target=self._run, args=(attempt,), daemon=True,
                                 name="store-probe").start()  # fmt: skip
        return attempt.done.wait(self.deadline) and attempt.ok

    def _run(self, attempt: _Attempt) -> None:
        try:
            attempt.ok = bool(self.check())
        except Exception:  # unreachable, refused, broken: not ready
            attempt.ok = False
        finally:
            with self._lock:
                self._flight = None
            attempt.done.set()


class _Attempt:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False
