"""A PostgreSQL history store's session is bounded: a lock another session holds (a
migration, an operator's open transaction) fails a `check --history` after the store's
lock_timeout with one line naming the store, where it hung until the CI job's own
timeout; no statement and no open transaction lasts for ever. Bounds the URL or the role
set are kept. On the real server of the history suite (tests/history/pgcluster.py)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from gatekeeper.dburl import HISTORY_BOUNDS
from gatekeeper.history import open_store
from gatekeeper.history.miles import _connect as connect_miles_store
from tests.helpers import gatekeeper, write_policy
from tests.history.test_cli_history import POLICY, run_file

SETTINGS = tuple(sorted(HISTORY_BOUNDS))


def shown(conn: psycopg.Connection) -> dict[str, str]:
    return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in SETTINGS}


def test_a_history_session_gets_the_bounds_the_server_leaves_unset(pg_url: str) -> None:
    with open_store(pg_url) as store:
        assert shown(store.conn) == {  # type: ignore[attr-defined]
            "idle_in_transaction_session_timeout": "1min",
            "lock_timeout": "30s",
            "statement_timeout": "5min",
        }


def test_bounds_the_url_or_the_role_set_are_kept(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("ALTER ROLE postgres IN DATABASE " + pg_url.rsplit("/", 1)[1]
                      + " SET statement_timeout = '42s'")  # fmt: skip
    url = f"{pg_url}?options=-c%20lock_timeout%3D700"
    with open_store(url) as store:
        got = shown(store.conn)  # type: ignore[attr-defined]
    assert got["lock_timeout"] == "700ms" and got["statement_timeout"] == "42s", got
    assert got["idle_in_transaction_session_timeout"] == "1min"


def test_a_miles_store_is_read_with_statement_and_lock_bounds_only(pg_url: str) -> None:
    """An import converts a large store's rows between its reads, in one transaction:
    the time between them is not bounded, each statement and each lock wait is."""
    conn, _ = connect_miles_store(pg_url)
    try:
        assert not conn.autocommit
        assert shown(conn) == {
            "idle_in_transaction_session_timeout": "0",
            "lock_timeout": "30s",
            "statement_timeout": "5min",
        }
    finally:
        conn.close()


def test_a_table_locked_elsewhere_fails_the_check_in_one_line_within_its_bound(
    tmp_path: Path, pg_url: str
) -> None:
    """`lock_timeout` from the URL (700 ms) stands for the default 30 s, which the first
    test shows is set: the failure is the same, only later."""
    write_policy(tmp_path / "drift.yaml", POLICY)
    run = run_file(tmp_path, 1, 1.0)
    with open_store(pg_url):
        pass  # the tables exist
    url = f"{pg_url}?options=-c%20lock_timeout%3D700"
    with psycopg.connect(pg_url) as blocker:  # a migration's lock, held open
        blocker.execute("LOCK TABLE gk_runs, gk_points IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        out = gatekeeper("check", run, "-p", str(tmp_path / "drift.yaml"),
                         "--history", url, "--record", "--run-id", "r1", timeout=60)  # fmt: skip
        took = time.monotonic() - started
        blocker.rollback()
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(lines) == 1 and "lock timeout" in lines[0], lines
    assert lines[0].startswith("gatekeeper: error: history store postgresql://"), lines
    assert took < 20, took  # the child's start and imports, then 0.7 s
    # and once the lock is gone the same command records the run
    again = gatekeeper("check", run, "-p", str(tmp_path / "drift.yaml"),
                       "--history", url, "--record", "--run-id", "r1")  # fmt: skip
    assert again.returncode == 5 and "as trusted" in again.stdout, again.stdout + again.stderr
