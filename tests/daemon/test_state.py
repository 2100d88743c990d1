"""The state store: atomic poll commits, outbox, and clear errors for unusable files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from gatekeeper.daemon.payload import restore
from gatekeeper.daemon.state import AlertState, PollCommit, RuleRow, StateStore
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError
from gatekeeper.policy.loader import load_policies
from tests.helpers import REPO


def ev_policies() -> list:
    return load_policies([str(REPO / "policies" / "rl-health.yaml")])


def commit(key: str = "/runs/a", **kw: object) -> PollCommit:
    ev = Evaluation(ev_policies())
    base = dict(
        key=key,
        target="t",
        cursor={"offset": 42},
        evaluation=ev,
        fingerprint="fp",
        verdict={"status": "fail", "run": {"name": "a"}},
        status="fail",
        points=7,
        ended=False,
        now=100.0,
        rules=[RuleRow("p", "r", "fail", "fail", 90.0, None, 0, "bad")],
        alert_states={("p", "r", "slack"): AlertState(True, 100.0)},
        alerts=[("slack", {"state": "firing", "run": "a"})],
    )
    return PollCommit(**{**base, **kw})  # type: ignore[arg-type]


def test_a_poll_round_trips_and_its_alert_is_pending_until_marked(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "s.db"))
    (alert_id,) = store.commit_poll(commit())
    store.close()
    store = StateStore(str(tmp_path / "s.db"))
    rec = store.load_runs()["/runs/a"]
    assert rec.cursor == {"offset": 42} and rec.points == 7 and rec.status == "fail"
    assert rec.state is not None and rec.evaluation is None  # data, restored by the daemon
    restored = restore(ev_policies(), rec.state, str(tmp_path / "s.db"), "/runs/a")
    assert isinstance(restored, Evaluation)
    assert rec.rules[("p", "r")].since == 90.0
    assert rec.alerts[("p", "r", "slack")] == AlertState(True, 100.0)
    assert [(i, ch) for i, ch, _, _ in store.pending_alerts()] == [(alert_id, "slack")]
    store.mark_alerts([alert_id], "sent", 101.0)
    assert store.pending_alerts() == []
    assert store.alert_log()[0]["outcome"] == "sent"


def test_garbage_file_is_a_clear_error_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StateError, match=r"s\.db is unusable.*move the file aside"):
        StateStore(str(path))
    assert path.read_bytes().startswith(b"this is not")  # never reset


def test_damaged_pages_are_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = StateStore(str(path))
    for i in range(30):
        store.commit_poll(commit(key=f"/runs/{i}"))
    store.close()
    data = bytearray(path.read_bytes())
    data[4096 : 4096 * 3] = b"\xff" * 8192  # clobber pages after the header
    path.write_bytes(bytes(data))
    with pytest.raises(StateError, match="unusable"):
        StateStore(str(path)).load_runs()


def test_foreign_sqlite_and_unknown_version_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE x (y)").connection.commit()
    with pytest.raises(StateError, match="not a gatekeeper state"):
        StateStore(str(other))
    path = tmp_path / "s.db"
    StateStore(str(path)).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StateError, match="schema version 99.*reads version 2"):
        StateStore(str(path))


def test_an_unreadable_run_state_is_a_state_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = StateStore(str(path))
    store.commit_poll(commit())
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET state = x'00ff00ff'")
    db.commit()
    db.close()
    with pytest.raises(StateError, match="run /runs/a: its state is not"):
        StateStore(str(path)).load_runs()


def test_an_alert_committed_before_a_crash_is_sent_once_after_the_restart(tmp_path: Path) -> None:
    from gatekeeper.daemon.config import load_config
    from gatekeeper.daemon.service import Daemon
    from tests.daemon.harness import write_config
    from tests.daemon.recorder import Recorder
    from tests.daemon.sources import open_test_source

    hook = Recorder()
    config = load_config(
        str(
            write_config(
                tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.1}]
            )
        )
    )
    store = StateStore(config.state)  # the crashed daemon committed the poll, sent nothing
    (alert_id,) = store.commit_poll(
        commit(
            now=time.time(),  # within retry_for: a recent crash
            alerts=[
                (
                    "hook",
                    {
                        "state": "firing",
                        "run": "a",
                        "run_key": "/runs/a",
                        "policy": "p",
                        "rule": "r",
                        "status": "fail",
                        "severity": "fail",
                        "message": "bad",
                        "reason_class": "bad",
                    },
                )
            ],
        )
    )
    store.close()
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        assert hook.wait(lambda: len(hook.bodies) == 1)
        assert hook.wait(lambda: daemon.store.alert_log()[0]["outcome"] == "sent")
        assert daemon.store.pending_alerts() == []
        daemon.stop()
        daemon = Daemon(config, open_test_source)  # and a second restart sends nothing more
        daemon.start()
        time.sleep(0.5)
        assert len(hook.bodies) == 1 and hook.requests == 1 and alert_id == 1
    finally:
        daemon.stop()
        hook.close()
