"""The lease cycle on a real PostgreSQL state (tests/history/conftest.py's cluster): a
run a replica renews is not "taken"; one it takes back after another replica held it in
between is, so the scheduler reads it again from the store instead of going on with what
it had in memory (the other replica may have committed past it)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from gatekeeper.daemon.stores import open_state
from tests.daemon.harness import POLICY, DaemonProcess
from tests.daemon.recorder import Recorder
from tests.daemon.replica_scenario import replica_config
from tests.daemon.test_replicas import append, stored
from tests.daemon.test_serve import firing_lines
from tests.helpers import wait_until

TTL = 30.0
LEASE = 3.0


def expire(url: str, run: str) -> None:
    """The lease runs out, as when its holder is cut off past the lease period."""
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE gkd_leases SET expires = 0 WHERE run = %s", (run,))


def test_a_run_held_by_another_in_between_is_taken_not_renewed(pg_url: str) -> None:
    a_store, b_store = open_state(pg_url), open_state(pg_url)
    try:
        a, b = a_store.lease_as("rep-a", TTL), b_store.lease_as("rep-b", TTL)
        a.offer("t", ["/runs/r"])
        first = a.cycle()
        assert first.held == {"/runs/r": "t"} and first.taken == {"/runs/r"}
        assert a.cycle().taken == set()  # renewed
        expire(pg_url, "/runs/r")  # a cut off: nobody took it yet
        again = a.cycle()
        assert again.held == {"/runs/r": "t"} and again.taken == set()  # still a's: renewed
        expire(pg_url, "/runs/r")
        assert b.cycle().taken == {"/runs/r"}  # b takes it over (and may commit)
        expire(pg_url, "/runs/r")  # b is gone in turn
        back = a.cycle()
        assert back.held == {"/runs/r": "t"} and back.taken == {"/runs/r"}
    finally:
        a_store.close()
        b_store.close()


def test_a_replica_cut_off_past_its_lease_reads_a_run_again_when_it_takes_it_back(
    tmp_path: Path, pg_url: str
) -> None:
    """Replica A (this process) has judged step 0 of the one run when it is cut off: its
    scheduler paused, no poll and no lease renewal. The lease runs out; replica B (a
    child process) takes the run over, judges step 1 — bad — and alerts, then stops,
    handing its lease back. A's next lease cycle takes the run back: it must go on from
    the committed record, not from what it had in memory, so step 1 is not judged again
    and its alert is not sent twice."""
    hook = Recorder()
    (tmp_path / "runs").mkdir()
    (tmp_path / "kl.yaml").write_text(POLICY)
    run = tmp_path / "runs" / "r.jsonl"
    append(run, 0)
    a = Daemon(load_config(str(replica_config(tmp_path, 0, pg_url, hook.url, LEASE))))
    b = DaemonProcess(replica_config(tmp_path, 1, pg_url, hook.url, LEASE),
                      {"GATEKEEPER_REPLICA": "rep-b"})
    a.start()
    try:
        assert wait_until(lambda: stored_points(pg_url) == 2, 20)  # A judged step 0
        a.scheduler.scheduler.pause()  # cut off
        expire(pg_url, str(run))
        append(run, 1, kl=0.5)
        b.start()
        assert wait_until(lambda: stored_points(pg_url) == 4, 30), b.tail()  # B judged it
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 1, 20)
        b.stop()  # a clean stop: its lease handed back at once
        a.scheduler.rebalance()  # A's first cycle back, before any poll of its own
        a.scheduler.scheduler.resume()
        append(run, 2)
        assert wait_until(lambda: stored_points(pg_url) == 6, 20)
        time.sleep(1.5)  # a second alert, if any, has had its group_wait
        assert firing_lines(hook.bodies) == {("r", "kl-small", "firing"): 1}
    finally:
        a.stop()
        b.stop()
        hook.close()


def stored_points(url: str) -> int:
    """The one run's committed points (0 before its first commit)."""
    return stored(url).get("r", (0, 0.0))[0]
