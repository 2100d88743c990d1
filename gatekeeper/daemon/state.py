"""The daemon's state store: one contract, two engines, one transaction per poll.

`SqlState` holds every query, written once for both engines: SQLite in WAL mode
(`StateStore`, the embedded default: one daemon per file, see lock.py) and PostgreSQL
(`state_postgres.PostgresState`, `state: postgresql://...`, shared by replicas).
`daemon/stores.py` `open_state(url)` opens the one a state URL names.

Per run: the source cursor, the judging state (`daemon/payload.py`: versioned JSON of the
rule trackers, so a restart resumes without re-reading history), the latest verdict.
Per rule: the confirmed status, a debounce candidate and since-when. Per alert channel
and rule: firing or not and when it was last sent. The alert log doubles as an outbox:
alerts are inserted `pending` in the same transaction as the poll that caused them and
marked after delivery (`sent`, `failed`, `dropped`, `expired`), so a `kill -9` at any
moment neither loses a verdict nor creates an alert twice.

A file that is not a gatekeeper state of a known version, or a run state that is not
of its declared shape, raises `StateError`; the store never starts over on its own.
The schema is versioned (`meta.schema_version`) and checked on every open; once the
tables exist, opening runs no DDL (a role that may only read and write rows works).
A file of schema 1 (pickled evaluations) is migrated without unpickling anything
(`_migrate_v1`).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekeeper import dburl
from gatekeeper.daemon import payload as run_state
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError

if TYPE_CHECKING:
    from gatekeeper.daemon.lease import Leases

log = logging.getLogger("gatekeeper.daemon")

SCHEMA_VERSION = 2
APP_ID = "gatekeeper-daemon"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    key TEXT PRIMARY KEY, target TEXT NOT NULL, cursor TEXT, state TEXT,
    fingerprint TEXT, verdict TEXT, status TEXT, points INTEGER NOT NULL DEFAULT 0,
    polls INTEGER NOT NULL DEFAULT 0, ended INTEGER NOT NULL DEFAULT 0, updated REAL
);
CREATE TABLE rules (
    run TEXT NOT NULL, policy TEXT NOT NULL, rule TEXT NOT NULL, severity TEXT NOT NULL,
    status TEXT NOT NULL, since REAL NOT NULL, candidate TEXT, candidate_count INTEGER
    NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', PRIMARY KEY (run, policy, rule)
);
CREATE TABLE alert_state (
    run TEXT NOT NULL, policy TEXT NOT NULL, rule TEXT NOT NULL, channel TEXT NOT NULL,
    firing INTEGER NOT NULL, last_sent REAL NOT NULL, PRIMARY KEY (run, policy, rule, channel)
);
CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, channel TEXT NOT NULL, payload TEXT NOT NULL,
    created REAL NOT NULL, outcome TEXT NOT NULL DEFAULT 'pending', done REAL, detail TEXT
);
CREATE INDEX alerts_pending ON alerts (outcome) WHERE outcome = 'pending';
"""


@dataclass
class RuleRow:
    """Debounced status of one rule on one run."""

    policy: str
    rule: str
    severity: str
    status: str  # confirmed status
    since: float  # when the confirmed status began
    candidate: str | None = None  # a different status seen, not yet confirmed
    candidate_count: int = 0
    message: str = ""


@dataclass
class AlertState:
    firing: bool
    last_sent: float


@dataclass
class RunRecord:
    key: str
    target: str
    cursor: dict[str, Any] | None
    state: dict[str, Any] | None  # the evaluation's data (payload.loads), not yet restored
    fingerprint: str | None
    verdict: dict[str, Any] | None
    status: str | None
    points: int
    polls: int
    ended: bool
    updated: float | None
    rules: dict[tuple[str, str], RuleRow]
    alerts: dict[tuple[str, str, str], AlertState]  # (policy, rule, channel)
    evaluation: Evaluation | None = None  # `state` restored against the run's policies


@dataclass
class PollCommit:
    """Everything one poll changes, written in one transaction."""

    key: str
    target: str
    cursor: dict[str, Any]
    evaluation: Evaluation
    fingerprint: str
    verdict: dict[str, Any]
    status: str
    points: int
    ended: bool
    now: float
    # the rule rows and alert states that differ from the committed ones (the rest are
    # in the store already: a steady poll changes a few of them, not every rule's)
    rules: list[RuleRow]
    alert_states: dict[tuple[str, str, str], AlertState]
    alerts: list[tuple[str, dict[str, Any]]]  # (channel, payload) to enqueue
    # `json.dumps(verdict)`, when the caller made it already (payload.VerdictText)
    verdict_text: str | None = None
    polls: int = 1  # the polls it commits: this one and those held before it (checkpoint)


class SqlState:
    """Thread-safe access to one state store (one connection, serialized by a lock).

    A backend supplies the connection, the placeholder, its table prefix, its
    transaction, its table listing and its schema; every query below is shared. In the
    SQL, `{p}` is the placeholder and `{t}` the table prefix."""

    placeholder = "?"
    prefix = ""
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, conn: Any, shown: str):
        self.conn = conn
        self.path = shown  # names the store in messages (a URL without its password)
        self._lock = threading.Lock()

    # ---- what a backend supplies --------------------------------------------------------
    @abstractmethod
    def _transaction(self) -> Any:
        """A context: one transaction that commits on success, rolls back on error."""

    @abstractmethod
    def _tables(self, cur: Any) -> set[str]:
        """Names of the tables that exist (with their prefix)."""

    @abstractmethod
    def _schema(self) -> list[str]:
        """The DDL of the current schema version."""

    def _failure(self, what: str, exc: BaseException) -> StateError:
        return StateError(f"state store {self.path}: {what} failed: {dburl.first_line(exc)}")

    def _migrate(self, cur: Any, version: str | None) -> bool:
        """Bring an older schema to SCHEMA_VERSION in `cur`'s transaction; False when
        `version` is not one this backend migrates from."""
        return False

    def _ensure(self) -> None:
        """Before each use: a backend whose connection can break reconnects here."""

    def _schema_lock(self, cur: Any) -> None:
        """Serialize opening among processes that may create the schema together."""

    def _fence(self, cur: Any, key: str) -> None:
        """In a commit's transaction: may this process write `key`? (replicas, lease.py)"""

    def lease_as(self, replica: str, ttl: float) -> Leases | None:
        """Share the runs with other replicas (a shared store only); None: this process
        is the one writer."""
        return None

    def reachable(self) -> bool:
        """Whether the store answers now (`/readyz`); an embedded file always does."""
        return True

    # ---- opening ------------------------------------------------------------------------
    def _sql(self, text: str) -> str:
        return text.format(p=self.placeholder, t=self.prefix)

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock:
            self._ensure()
            with self._transaction():
                cur = self.conn.cursor()
                try:
                    yield cur
                finally:
                    cur.close()

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock:
            self._ensure()
            cur = self.conn.cursor()
            try:
                yield cur
            finally:
                cur.close()

    def _open(self, *, create: bool = True) -> bool:
        """Check (or, with `create`, make) the schema in one transaction; False when it
        does not exist and `create` is off."""
        with self._tx() as cur:
            self._schema_lock(cur)
            if self._sql("{t}meta") not in self._tables(cur):
                if self._tables(cur) & {self._sql("{t}" + n) for n in _TABLES}:
                    raise self._corrupt("it is not a gatekeeper state (no meta table)")
                if not create:
                    return False
                for stmt in self._schema():
                    cur.execute(self._sql(stmt))
                cur.executemany(
                    self._sql("INSERT INTO {t}meta VALUES ({p}, {p})"),
                    [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
                )
                return True
            self._check(cur)
        return True

    def _check(self, cur: Any) -> None:
        cur.execute(self._sql("SELECT key, value FROM {t}meta"))
        meta = dict(cur.fetchall())
        if meta.get("app") != APP_ID:
            raise self._corrupt(f"meta.app is {meta.get('app')!r}, expected {APP_ID!r}")
        version = meta.get("schema_version")
        if version == str(SCHEMA_VERSION) or self._migrate(cur, version):
            return
        raise StateError(
            f"state file {self.path} has schema version {version}, this gatekeeper reads "
            f"version {SCHEMA_VERSION}; run the gatekeeper release that wrote it, or move "
            "the file aside to start over"
        )

    def _corrupt(self, what: str) -> StateError:
        return StateError(
            f"state file {self.path} is unusable: {what}. gatekeeper does not start over on "
            "its own: move the file aside (the daemon then re-reads every run from the start "
            "and may alert again) or restore a backup, then restart"
        )

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # ---- reading ------------------------------------------------------------------------
    def load_runs(self) -> dict[str, RunRecord]:
        """Every run with its rules and alert states. A run state that is not ours is a
        StateError naming the run."""
        return self._load("", ())

    def load_run(self, key: str) -> RunRecord | None:
        """One run as committed now (a replica taking it over)."""
        return self._load(" WHERE {k} = {p}", (key,)).get(key)

    def _load(self, where: str, args: tuple[Any, ...]) -> dict[str, RunRecord]:
        try:
            with self._read() as cur:
                cur.execute(self._sql(_RUN_COLUMNS + where.replace("{k}", "key")), args)
                rows = cur.fetchall()
                cur.execute(self._sql("SELECT * FROM {t}rules" + where.replace("{k}", "run")), args)
                rules = cur.fetchall()
                alert_sql = "SELECT * FROM {t}alert_state" + where.replace("{k}", "run")
                cur.execute(self._sql(alert_sql), args)
                alerts = cur.fetchall()
        except self.errors as exc:
            raise self._failure("reading the runs", exc) from None
        out = {r[0]: self._record(r) for r in rows}
        for run, policy, rule, sev, status, since, cand, count, msg in rules:
            if run in out:
                out[run].rules[(policy, rule)] = RuleRow(
                    policy, rule, sev, status, since, cand, count, msg
                )
        for run, policy, rule, channel, firing, last in alerts:
            if run in out:
                out[run].alerts[(policy, rule, channel)] = AlertState(bool(firing), last)
        return out

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        key, target, cursor, state, fp, verdict, status, points, polls, ended, updated = row
        data = run_state.loads(state, self.path, key) if state is not None else None
        if state is not None and data is None:  # an older layout: re-read, alerts kept
            log.warning(
                "run %s: its judging state was saved by an older gatekeeper (this one reads "
                "state version %d); it is re-read from its source, its alert state kept",
                key,
                run_state.STATE_VERSION,
            )
            cursor, fp, points = None, None, 0
        try:
            cur = json.loads(cursor) if cursor else None
            ver = json.loads(verdict) if verdict else None
        except ValueError as exc:
            why = f"its cursor or verdict is not JSON ({exc})"
            raise run_state.refused(self.path, key, why) from None
        if (cur is not None and not isinstance(cur, dict)) or (
            ver is not None and not isinstance(ver, dict)
        ):
            raise run_state.refused(self.path, key, "its cursor or verdict is not a mapping")
        return RunRecord(
            key, target, cur, data, fp, ver, status, points, polls, bool(ended), updated, {}, {}
        )

    def pending_alerts(self) -> list[tuple[int, str, dict[str, Any], float]]:
        """(id, channel, payload, created) of every alert not yet delivered, oldest first."""
        with self._read() as cur:
            cur.execute(
                self._sql(
                    "SELECT id, channel, payload, created FROM {t}alerts "
                    "WHERE outcome = 'pending' ORDER BY id"
                )
            )
            rows = cur.fetchall()
        return [(i, ch, json.loads(p), created) for i, ch, p, created in rows]

    def alert_log(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._read() as cur:
            cur.execute(
                self._sql(
                    "SELECT id, channel, payload, created, outcome, done, detail FROM "
                    "{t}alerts ORDER BY id DESC LIMIT {p}"
                ),
                (limit,),
            )
            rows = cur.fetchall()
        keys = ("id", "channel", "payload", "created", "outcome", "done", "detail")
        return [dict(zip(keys, (*r[:2], json.loads(r[2]), *r[3:]), strict=True)) for r in rows]

    # ---- writing ------------------------------------------------------------------------
    def commit_poll(self, c: PollCommit) -> list[int]:
        """Write one poll's effects atomically; returns the ids of the alerts it created."""
        state = run_state.dumps(c.evaluation)
        with self._tx() as cur:
            self._fence(cur, c.key)
            cur.execute(
                self._sql(_UPSERT_RUN),
                (
                    c.key,
                    c.target,
                    json.dumps(c.cursor),
                    state,
                    c.fingerprint,
                    json.dumps(c.verdict) if c.verdict_text is None else c.verdict_text,
                    c.status,
                    c.points,
                    c.polls,
                    int(c.ended),
                    c.now,
                ),
            )
            return self._write_effects(cur, c.key, c.rules, c.alert_states, c.alerts, c.now)

    def commit_unreadable(
        self,
        key: str,
        target: str,
        now: float,
        rule: RuleRow,
        alert_states: dict[tuple[str, str, str], AlertState],
        alerts: list[tuple[str, dict[str, Any]]],
    ) -> list[int]:
        """A run that cannot be read is `error`: its status, its source rule and the alerts
        in one transaction. Cursor, state and verdict stay as last committed."""
        with self._tx() as cur:
            self._fence(cur, key)
            cur.execute(
                self._sql(
                    "INSERT INTO {t}runs (key, target, status) VALUES ({p},{p},'error') "
                    "ON CONFLICT (key) DO UPDATE SET status='error'"
                ),
                (key, target),
            )
            return self._write_effects(cur, key, [rule], alert_states, alerts, now)

    def reset_run(self, key: str) -> bool:
        """Forget a run's judging state (its policies changed, or `serve --reset-state`):
        it is re-read from the start; its rule and alert rows stay (no alert sent twice).
        False when the store has no such run."""
        with self._tx() as cur:
            cur.execute(
                self._sql(
                    "UPDATE {t}runs SET cursor=NULL, state=NULL, fingerprint=NULL, points=0 "
                    "WHERE key={p}"
                ),
                (key,),
            )
            return int(cur.rowcount) > 0

    def mark_alerts(self, ids: Iterable[int], outcome: str, now: float, detail: str = "") -> None:
        with self._tx() as cur:
            cur.executemany(
                self._sql("UPDATE {t}alerts SET outcome={p}, done={p}, detail={p} WHERE id={p}"),
                [(outcome, now, detail[:500], i) for i in ids],
            )

    def _write_effects(
        self,
        cur: Any,
        key: str,
        rules: list[RuleRow],
        alert_states: dict[tuple[str, str, str], AlertState],
        alerts: list[tuple[str, dict[str, Any]]],
        now: float,
    ) -> list[int]:
        """Rule rows, alert states and new outbox alerts of one run; the new alert ids."""
        rows = [
            (key, r.policy, r.rule, r.severity, r.status, r.since, r.candidate)
            + (r.candidate_count, r.message)
            for r in rules
        ]
        if rows:
            cur.executemany(self._sql(_UPSERT_RULE), rows)
        states = [
            (key, p, r, ch, int(a.firing), a.last_sent) for (p, r, ch), a in alert_states.items()
        ]
        if states:
            cur.executemany(self._sql(_UPSERT_ALERT_STATE), states)
        ids: list[int] = []
        for channel, payload in alerts:
            cur.execute(
                self._sql(
                    "INSERT INTO {t}alerts (channel, payload, created) VALUES ({p},{p},{p}) "
                    "RETURNING id"
                ),
                (channel, json.dumps(payload), now),
            )
            ids.append(int(cur.fetchone()[0]))
        return ids


_TABLES = ("meta", "runs", "rules", "alert_state", "alerts")
_RUN_COLUMNS = (
    "SELECT key, target, cursor, state, fingerprint, verdict, status, points, polls, ended, "
    "updated FROM {t}runs"
)
_UPSERT_RUN = (
    "INSERT INTO {t}runs (key, target, cursor, state, fingerprint, verdict, status, points,"
    " polls, ended, updated) VALUES ({p},{p},{p},{p},{p},{p},{p},{p},{p},{p},{p})"
    " ON CONFLICT (key) DO UPDATE SET target=excluded.target, cursor=excluded.cursor,"
    " state=excluded.state, fingerprint=excluded.fingerprint, verdict=excluded.verdict,"
    " status=excluded.status, points=excluded.points, polls={t}runs.polls+excluded.polls,"
    " ended=excluded.ended, updated=excluded.updated"
)
_UPSERT_RULE = (
    "INSERT INTO {t}rules VALUES ({p},{p},{p},{p},{p},{p},{p},{p},{p})"
    " ON CONFLICT (run, policy, rule) DO UPDATE SET severity=excluded.severity,"
    " status=excluded.status, since=excluded.since, candidate=excluded.candidate,"
    " candidate_count=excluded.candidate_count, message=excluded.message"
)
_UPSERT_ALERT_STATE = (
    "INSERT INTO {t}alert_state VALUES ({p},{p},{p},{p},{p},{p})"
    " ON CONFLICT (run, policy, rule, channel) DO UPDATE SET firing=excluded.firing,"
    " last_sent=excluded.last_sent"
)


class StateStore(SqlState):
    """The embedded default: one SQLite file in WAL mode (a path or `sqlite:` URL)."""

    def __init__(self, path: str):
        path = dburl.sqlite_path(path)
        existed = os.path.exists(path) and os.path.getsize(path) > 0
        if not existed:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        super().__init__(None, path)
        try:
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL survives a process kill; only power loss may drop the last txn.
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA busy_timeout=5000")
            if existed:
                ok = self.conn.execute("PRAGMA quick_check").fetchone()
                if not ok or ok[0] != "ok":
                    why = ok[0] if ok else "no answer"
                    raise self._corrupt(f"integrity check failed ({why})")
            if not self._open(create=not existed):
                why = "it is a SQLite file but not a gatekeeper state (no meta table)"
                raise self._corrupt(why)
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(str(exc)) from None

    def _failure(self, what: str, exc: BaseException) -> StateError:
        return self._corrupt(str(exc))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _tables(self, cur: Any) -> set[str]:
        cur.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {str(r[0]) for r in cur.fetchall()}

    def _schema(self) -> list[str]:
        return [s for s in _SCHEMA.split(";") if s.strip()]

    def _migrate(self, cur: Any, version: str | None) -> bool:
        """Schema 1 kept a pickled `Evaluation` per run. Nothing is unpickled: the blobs are
        dropped and each run's cursor reset, so its points are re-read from the source and
        its trackers rebuilt from data. Rule, alert-state and outbox rows are plain columns
        and stay, so an alert already sent is not sent again."""
        if version != "1":
            return False
        runs = cur.execute("SELECT count(*) FROM runs").fetchone()[0]
        cur.execute("ALTER TABLE runs ADD COLUMN state TEXT")
        cur.execute(
            "UPDATE runs SET evaluation=NULL, state=NULL, cursor=NULL, fingerprint=NULL, points=0"
        )
        cur.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        log.warning(
            "state file %s: migrated from schema 1 (pickled evaluations, not read) to %d; "
            "%d run(s) are re-read from their source, alert and dedup state kept",
            self.path,
            SCHEMA_VERSION,
            runs,
        )
        return True
