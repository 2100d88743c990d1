"""The daemon's state store: SQLite in WAL mode, one transaction per poll.

Per run: the source cursor, the judging state (`daemon/payload.py`: versioned JSON of the
rule trackers, so a restart resumes without re-reading history), the latest verdict.
Per rule: the confirmed status, a debounce candidate and since-when. Per alert channel
and rule: firing or not and when it was last sent. The alert log doubles as an outbox:
alerts are inserted `pending` in the same transaction as the poll that caused them and
marked after delivery (`sent`, `failed`, `dropped`, `expired`), so a `kill -9` at any
moment neither loses a verdict nor creates an alert twice.

A file that is not a gatekeeper state of a known version, or a run state that is not
of its declared shape, raises `StateError`; the store never starts over on its own.
A file of schema 1 (pickled evaluations) is migrated without unpickling anything
(`_migrate_v1`).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gatekeeper.daemon import payload as run_state
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError

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
    rules: list[RuleRow]
    alert_states: dict[tuple[str, str, str], AlertState]
    alerts: list[tuple[str, dict[str, Any]]]  # (channel, payload) to enqueue


class StateStore:
    """Thread-safe access to one state file (one connection, serialized by a lock)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        existed = os.path.exists(path) and os.path.getsize(path) > 0
        if not existed:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL survives a process kill; only power loss may drop the last txn.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            if existed:
                self._check()
            else:
                self._create()
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(str(exc)) from None

    # ---- opening ------------------------------------------------------------------------
    def _corrupt(self, what: str) -> StateError:
        return StateError(
            f"state file {self.path} is unusable: {what}. gatekeeper does not start over on "
            "its own: move the file aside (the daemon then re-reads every run from the start "
            "and may alert again) or restore a backup, then restart"
        )

    def _create(self) -> None:
        with self._tx() as db:
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                db.execute(stmt)
            db.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("app", APP_ID), ("schema_version", str(SCHEMA_VERSION))],
            )

    def _check(self) -> None:
        ok = self._db.execute("PRAGMA quick_check").fetchone()
        if not ok or ok[0] != "ok":
            raise self._corrupt(f"integrity check failed ({ok[0] if ok else 'no answer'})")
        tables = {
            r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if "meta" not in tables:
            raise self._corrupt("it is a SQLite file but not a gatekeeper state (no meta table)")
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("app") != APP_ID:
            raise self._corrupt(f"meta.app is {meta.get('app')!r}, expected {APP_ID!r}")
        version = meta.get("schema_version")
        if version == "1":
            self._migrate_v1()
            return
        if version != str(SCHEMA_VERSION):
            raise StateError(
                f"state file {self.path} has schema version {version}, this gatekeeper reads "
                f"version {SCHEMA_VERSION}; run the gatekeeper release that wrote it, or move "
                "the file aside to start over"
            )

    def _migrate_v1(self) -> None:
        """Schema 1 kept a pickled `Evaluation` per run. Nothing is unpickled: the blobs are
        dropped and each run's cursor reset, so its points are re-read from the source and
        its trackers rebuilt from data. Rule, alert-state and outbox rows are plain columns
        and stay, so an alert already sent is not sent again."""
        with self._tx() as db:
            runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
            db.execute("ALTER TABLE runs ADD COLUMN state TEXT")
            db.execute(
                "UPDATE runs SET evaluation=NULL, state=NULL, cursor=NULL, fingerprint=NULL,"
                " points=0"
            )
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        log.warning(
            "state file %s: migrated from schema 1 (pickled evaluations, not read) to %d; "
            "%d run(s) are re-read from their source, alert and dedup state kept",
            self.path,
            SCHEMA_VERSION,
            runs,
        )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- reading ------------------------------------------------------------------------
    def load_runs(self) -> dict[str, RunRecord]:
        """Every run with its rules and alert states. A run state that is not ours is a
        StateError naming the run."""
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT key, target, cursor, state, fingerprint, verdict, status, "
                    "points, polls, ended, updated FROM runs"
                ).fetchall()
                rules = self._db.execute("SELECT * FROM rules").fetchall()
                alerts = self._db.execute("SELECT * FROM alert_state").fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._corrupt(str(exc)) from None
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
        with self._lock:
            rows = self._db.execute(
                "SELECT id, channel, payload, created FROM alerts WHERE outcome = 'pending' "
                "ORDER BY id"
            ).fetchall()
        return [(i, ch, json.loads(p), created) for i, ch, p, created in rows]

    def alert_log(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, channel, payload, created, outcome, done, detail FROM alerts "
                "ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        keys = ("id", "channel", "payload", "created", "outcome", "done", "detail")
        return [dict(zip(keys, (*r[:2], json.loads(r[2]), *r[3:]), strict=True)) for r in rows]

    # ---- writing ------------------------------------------------------------------------
    def commit_poll(self, c: PollCommit) -> list[int]:
        """Write one poll's effects atomically; returns the ids of the alerts it created."""
        state = run_state.dumps(c.evaluation)
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (key, target, cursor, state, fingerprint, verdict, status,"
                " points, polls, ended, updated) VALUES (?,?,?,?,?,?,?,?,1,?,?) ON CONFLICT(key)"
                " DO UPDATE SET target=excluded.target, cursor=excluded.cursor, state="
                "excluded.state, fingerprint=excluded.fingerprint, verdict=excluded.verdict,"
                " status=excluded.status, points=excluded.points, polls=polls+1,"
                " ended=excluded.ended, updated=excluded.updated",
                (
                    c.key,
                    c.target,
                    json.dumps(c.cursor),
                    state,
                    c.fingerprint,
                    json.dumps(c.verdict),
                    c.status,
                    c.points,
                    int(c.ended),
                    c.now,
                ),
            )
            ids = _write_effects(db, c.key, c.rules, c.alert_states, c.alerts, c.now)
        return ids

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
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (key, target, status) VALUES (?,?,'error') ON CONFLICT(key)"
                " DO UPDATE SET status='error'",
                (key, target),
            )
            return _write_effects(db, key, [rule], alert_states, alerts, now)

    def reset_run(self, key: str) -> bool:
        """Forget a run's judging state (its policies changed, or `serve --reset-state`):
        it is re-read from the start; its rule and alert rows stay (no alert sent twice).
        False when the store has no such run."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE runs SET cursor=NULL, state=NULL, fingerprint=NULL, points=0 WHERE key=?",
                (key,),
            )
        return cur.rowcount > 0

    def mark_alerts(self, ids: Iterable[int], outcome: str, now: float, detail: str = "") -> None:
        with self._tx() as db:
            db.executemany(
                "UPDATE alerts SET outcome=?, done=?, detail=? WHERE id=?",
                [(outcome, now, detail[:500], i) for i in ids],
            )


def _write_effects(
    db: sqlite3.Connection,
    key: str,
    rules: list[RuleRow],
    alert_states: dict[tuple[str, str, str], AlertState],
    alerts: list[tuple[str, dict[str, Any]]],
    now: float,
) -> list[int]:
    """Rule rows, alert states and new outbox alerts of one run; the new alert ids."""
    db.executemany(
        "INSERT OR REPLACE INTO rules VALUES (?,?,?,?,?,?,?,?,?)",
        [
            (
                key,
                r.policy,
                r.rule,
                r.severity,
                r.status,
                r.since,
                r.candidate,
                r.candidate_count,
                r.message,
            )
            for r in rules
        ],
    )
    db.executemany(
        "INSERT OR REPLACE INTO alert_state VALUES (?,?,?,?,?,?)",
        [(key, p, r, ch, int(a.firing), a.last_sent) for (p, r, ch), a in alert_states.items()],
    )
    ids: list[int] = []
    for channel, payload in alerts:
        cur = db.execute(
            "INSERT INTO alerts (channel, payload, created) VALUES (?,?,?)",
            (channel, json.dumps(payload), now),
        )
        ids.append(int(cur.lastrowid or 0))
    return ids
