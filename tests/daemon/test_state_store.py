"""The state-store contract, run on both engines: SQLite (the embedded default) and a
real PostgreSQL cluster started by tests/history/conftest.py's fixture."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gatekeeper.daemon.payload import restore
from gatekeeper.daemon.state import AlertState, RuleRow, SqlState
from gatekeeper.daemon.stores import open_state
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError
from tests.daemon.test_state import commit, ev_policies
from tests.helpers import REPO


@pytest.fixture(params=["sqlite", "postgres"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(state_url: str) -> Iterator[SqlState]:
    s = open_state(state_url)
    yield s
    s.close()


def test_a_poll_and_its_outbox_round_trip_across_a_reopen(state_url: str) -> None:
    store = open_state(state_url)
    (first,) = store.commit_poll(commit())
    (second,) = store.commit_poll(commit(points=9, cursor={"offset": 50}))
    store.close()
    store = open_state(state_url)
    try:
        rec = store.load_runs()["/runs/a"]
        assert (rec.cursor, rec.points, rec.polls, rec.status) == ({"offset": 50}, 9, 2, "fail")
        restored = restore(ev_policies(), rec.state or {}, store.path, "/runs/a")
        assert isinstance(restored, Evaluation)
        assert rec.rules[("p", "r")] == RuleRow("p", "r", "fail", "fail", 90.0, None, 0, "bad")
        assert rec.alerts[("p", "r", "slack")] == AlertState(True, 100.0)
        assert second > first
        assert [i for i, *_ in store.pending_alerts()] == [first, second]
        store.mark_alerts([first], "sent", 101.0, "ok")
        assert [i for i, *_ in store.pending_alerts()] == [second]
        log = store.alert_log()
        assert [(e["id"], e["outcome"]) for e in log] == [(second, "pending"), (first, "sent")]
        assert log[1]["payload"] == {"state": "firing", "run": "a"} and log[1]["done"] == 101.0
    finally:
        store.close()


def test_rule_and_alert_rows_are_replaced_not_duplicated(store: SqlState) -> None:
    store.commit_poll(commit())
    later = RuleRow("p", "r", "fail", "pass", 120.0, "fail", 1, "fine")
    store.commit_poll(
        commit(
            rules=[later], alert_states={("p", "r", "slack"): AlertState(False, 100.0)}, alerts=[]
        )
    )
    rec = store.load_runs()["/runs/a"]
    assert store.load_run("/runs/a") == rec and store.load_run("/runs/none") is None
    assert list(rec.rules.values()) == [later]
    assert rec.alerts == {("p", "r", "slack"): AlertState(False, 100.0)}


def test_an_unreadable_run_keeps_its_cursor_and_a_reset_forgets_it(store: SqlState) -> None:
    row = RuleRow("gatekeeper", "source-readable", "fail", "error", 5.0, None, 0, "gone")
    (alert,) = store.commit_unreadable("/runs/new", "t", 5.0, row, {}, [("hook", {"x": 1})])
    store.commit_poll(commit())
    store.commit_unreadable("/runs/a", "t", 6.0, row, {}, [])
    runs = store.load_runs()
    assert runs["/runs/new"].status == "error" and runs["/runs/new"].cursor is None
    assert runs["/runs/a"].status == "error" and runs["/runs/a"].cursor == {"offset": 42}
    assert runs["/runs/a"].rules[("gatekeeper", "source-readable")].message == "gone"
    assert store.pending_alerts()[0][:2] == (alert, "hook")
    assert store.reset_run("/runs/a") and not store.reset_run("/runs/none")
    rec = store.load_runs()["/runs/a"]
    assert (rec.cursor, rec.state, rec.points) == (None, None, 0) and rec.rules  # rows kept


def _set_version(url: str, value: str) -> None:
    store = open_state(url)
    with store._tx() as cur:  # the store's own connection: either engine
        cur.execute(store._sql("UPDATE {t}meta SET value={p} WHERE key='schema_version'"), (value,))
    store.close()


def test_an_unknown_schema_version_is_refused_on_both_engines(state_url: str) -> None:
    _set_version(state_url, "99")
    with pytest.raises(StateError, match="schema version 99.*reads version 2"):
        open_state(state_url)


def test_replicas_opening_an_empty_database_together_create_the_schema_once(
    pg_url: str,
) -> None:
    code = (
        "import sys; from gatekeeper.daemon.stores import open_state; "
        "open_state(sys.argv[1]).close(); print('opened')"
    )
    kids = [
        subprocess.Popen(
            [sys.executable, "-c", code, pg_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [k.communicate(timeout=60) for k in kids]
    assert [k.returncode for k in kids] == [0] * 4, outs
    assert all(out.strip() == "opened" for out, _ in outs)


def test_a_role_with_only_dml_rights_works_once_the_tables_exist(
    pg_server: str,
    pg_url: str,
) -> None:
    import psycopg

    db = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE ROLE gk_app_" + db + " LOGIN")
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        admin.execute(f"GRANT USAGE ON SCHEMA public TO gk_app_{db}")
    app_url = pg_server.replace("postgres@", f"gk_app_{db}@") + f"/{db}"
    with pytest.raises(StateError, match="permission denied"):
        open_state(app_url)  # no tables yet, and this role may not create them
    open_state(pg_url).close()  # the owner creates them once
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO gk_app_{db}"
        )
        admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO gk_app_{db}")
    store = open_state(app_url)
    try:
        (alert,) = store.commit_poll(commit())
        store.mark_alerts([alert], "sent", 1.0)
        assert store.load_runs()["/runs/a"].points == 7 and store.reset_run("/runs/a")
    finally:
        store.close()


def test_the_password_of_a_state_url_is_never_shown(pg_server: str) -> None:
    port = pg_server.rsplit(":", 1)[1]
    url = f"postgresql://gk:s3cret-pw@127.0.0.1:{port}/nosuchdb"
    with pytest.raises(StateError) as err:
        open_state(url)
    assert "s3cret-pw" not in str(err.value) and "gk:***@127.0.0.1" in str(err.value)
