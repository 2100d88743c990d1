"""Runs shared among replicas of one PostgreSQL state: each run is leased by one replica.

- Discovery `offer`s every run it lists: a lease row is inserted once, whoever sees the
  run first (`ON CONFLICT DO NOTHING`), with no holder.
- Every `cycle` (a third of the lease period) a replica says it is alive
  (`gkd_replicas`), renews the leases it holds and takes free or expired ones up to its
  fair share, ceil(live runs / live replicas), with `SELECT ... FOR UPDATE SKIP LOCKED`,
  so two replicas never take one run. Past its share by more than one it hands the
  excess back (`shed`), after the scheduler stopped polling those runs.
- Each poll's commit checks and renews its run's lease in the same transaction
  (`PostgresState._fence`): a replica whose lease expired (stopped, partitioned) commits
  nothing more for that run and drops it; the taker resumes from the committed cursor.
- A run that ended is leased by none; `ended` lists them for every replica's `/api/runs`.
- Pending alerts belong to the replica that committed them (`gkd_alerts.owner`); those
  of a replica not seen for a lease period are claimed by a live one and delivered once.

Times are the server's clock, never a replica's, so clock skew between hosts does not
matter.
"""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass, field
from typing import Any

NOW = "extract(epoch from clock_timestamp())"


class LeaseLost(Exception):
    """A commit for a run whose lease this replica no longer holds; nothing was written."""


def replica_name() -> str:
    """GATEKEEPER_REPLICA (a pod name), else host:pid: unique among live replicas."""
    return os.environ.get("GATEKEEPER_REPLICA") or f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Cycle:
    held: dict[str, str]  # run -> target name, after this cycle
    shed: list[str] = field(default_factory=list)  # runs to stop polling, then `release`
    share: int = 0
    replicas: int = 1
    # runs taken this cycle (free or expired), not renewed: one this replica still polls
    # was held by another in between, which may have committed past what it has in hand
    taken: set[str] = field(default_factory=set)


class Leases:
    """The lease queries; each call is one transaction on the state store's connection."""

    def __init__(self, store: Any, replica: str, ttl: float):
        self.store = store
        self.replica = replica
        self.ttl = ttl

    def offer(self, target: str, runs: list[str]) -> None:
        if not runs:
            return
        with self.store._tx() as cur:
            cur.executemany(
                "INSERT INTO gkd_leases (run, target) VALUES (%s, %s) ON CONFLICT (run) DO NOTHING",
                [(run, target) for run in runs],
            )

    def cycle(self) -> Cycle:
        """Heartbeat, renew, take up to the fair share; what to hand back."""
        me, ttl = self.replica, self.ttl
        with self.store._tx() as cur:
            cur.execute(
                f"INSERT INTO gkd_replicas VALUES (%s, {NOW}) "
                f"ON CONFLICT (replica) DO UPDATE SET seen = {NOW}",
                (me,),
            )
            cur.execute(f"SELECT count(*) FROM gkd_replicas WHERE seen > {NOW} - %s", (ttl,))
            replicas = max(1, int(cur.fetchone()[0]))
            cur.execute(f"SELECT count(*) FROM gkd_leases l {_LIVE}")
            share = math.ceil(int(cur.fetchone()[0]) / replicas)
            cur.execute(
                f"UPDATE gkd_leases SET expires = {NOW} + %s WHERE holder = %s AND run IN "
                f"(SELECT l.run FROM gkd_leases l {_LIVE}) RETURNING run, target",
                (ttl, me),
            )
            held = dict(cur.fetchall())
            want = share - len(held)
            taken: dict[str, str] = {}
            if want > 0:
                cur.execute(_TAKE, (me, ttl, want))
                taken = dict(cur.fetchall())
                held.update(taken)
        shed = sorted(held)[share + 1 :] if len(held) > share + 1 else []
        return Cycle(held, shed, share, replicas, set(taken))

    def release(self, runs: list[str]) -> None:
        """Hand runs back (this replica stopped polling them, or they ended)."""
        if runs:
            with self.store._tx() as cur:
                cur.execute(
                    "UPDATE gkd_leases SET holder = NULL, expires = 0 "
                    "WHERE holder = %s AND run = ANY(%s)",
                    (self.replica, runs),
                )

    def leave(self) -> None:
        """A clean stop: every lease back at once, so others need not wait for expiry."""
        with self.store._tx() as cur:
            cur.execute(
                "UPDATE gkd_leases SET holder = NULL, expires = 0 WHERE holder = %s",
                (self.replica,),
            )
            cur.execute("DELETE FROM gkd_replicas WHERE replica = %s", (self.replica,))

    def ended(self, ident: str | None = None) -> list[dict[str, Any]]:
        """Runs that ended, as committed: leased and polled by no replica (`/api/runs`
        lists them on every replica, after a restart too); `ident`: the one of that key
        or name."""
        name = "(verdict::json)->'run'->>'name'"
        where = "" if ident is None else f" AND (key = %(i)s OR {name} = %(i)s)"
        with self.store._read() as cur:
            cur.execute(
                f"SELECT key, target, status, points, updated, {name} FROM gkd_runs "
                f"WHERE ended <> 0{where} ORDER BY key",
                {"i": ident},
            )
            rows = cur.fetchall()
        keys = ("key", "target", "status", "points", "last_success", "name")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def claim_alerts(self, *, mine: bool) -> list[tuple[int, str, dict[str, Any], float]]:
        """Pending alerts whose owner is gone (not seen for a lease period), and with
        `mine` this replica's own (a restart under the same name), now owned by this one."""
        who = "owner IS NULL OR owner = %s OR " if mine else "owner IS NULL OR "
        with self.store._tx() as cur:
            cur.execute(
                f"UPDATE gkd_alerts SET owner = %s WHERE outcome = 'pending' AND ({who}"
                f"owner NOT IN (SELECT replica FROM gkd_replicas WHERE seen > {NOW} - %s)) "
                "RETURNING id, channel, payload, created",
                (self.replica, *((self.replica,) if mine else ()), self.ttl),
            )
            rows = sorted(cur.fetchall())
        return [(int(i), ch, json.loads(p), created) for i, ch, p, created in rows]


# runs that have not ended (a run without a committed poll yet has not)
_LIVE = "LEFT JOIN gkd_runs r ON r.key = l.run WHERE coalesce(r.ended, 0) = 0"
_TAKE = (
    f"UPDATE gkd_leases SET holder = %s, expires = {NOW} + %s WHERE run IN ("
    f"SELECT l.run FROM gkd_leases l {_LIVE} AND (l.holder IS NULL OR l.expires < {NOW}) "
    "ORDER BY l.run LIMIT %s FOR UPDATE OF l SKIP LOCKED) RETURNING run, target"
)
