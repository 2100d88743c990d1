"""The daemon's state is versioned data: a restart resumes from it, a file of the old
pickle layout is migrated without unpickling anything, a tampered state is refused."""

from __future__ import annotations

import json
import logging
import pickle  # only to build an old-layout file: the package never imports pickle
import sqlite3
import time
from pathlib import Path

import pytest

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.payload import STATE_VERSION
from gatekeeper.daemon.service import Daemon
from gatekeeper.errors import StateError
from tests.daemon.harness import DaemonProcess, write_config
from tests.daemon.recorder import Recorder
from tests.daemon.sources import open_test_source

UNPICKLED: list[str] = []


def _explode() -> None:
    UNPICKLED.append("unpickled")  # the flag: set only if something loads the pickle
    raise RuntimeError("the old pickle was executed")


class Bomb:
    """Pickles as a call to `_explode`: loading it would run code."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_explode, ())


OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    key TEXT PRIMARY KEY, target TEXT NOT NULL, cursor TEXT, evaluation BLOB,
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
"""


def _rows(path: Path, steps: range, bad_at: int, end: bool = False) -> None:
    with open(path, "a") as fh:
        for s in steps:
            kl = 0.5 if s >= bad_at else 0.001
            fh.write(json.dumps({"train/step": s, "train/ppo_kl": kl, "train/loss": 1.0}) + "\n")
        if end:
            fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")


def _wait(pred: object, timeout: float = 20.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def _write_old_state(path: Path, key: str, now: float) -> None:
    """A state file as the previous gatekeeper wrote it: schema 1, a pickled evaluation,
    the rule kl-small already failing and its alert already sent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.executemany("INSERT INTO meta VALUES (?, ?)", [("app", "gatekeeper-daemon"),
                                                      ("schema_version", "1")])
    verdict = {"status": "fail", "final": False, "run": {"name": "r"}, "results": []}
    db.execute(
        "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (key, "targets[0]", json.dumps({"offset": 120}), pickle.dumps(Bomb()), "oldfp",
         json.dumps(verdict), "fail", 10, 3, 0, now),
    )
    db.execute(
        "INSERT INTO rules VALUES (?,?,?,?,?,?,?,?,?)",
        (key, "kl", "kl-small", "fail", "fail", now, None, 0, "old message"),
    )
    db.execute(
        "INSERT INTO alert_state VALUES (?,?,?,?,?,?)", (key, "kl", "kl-small", "hook", 1, now)
    )
    db.execute(
        "INSERT INTO alerts (channel, payload, created, outcome, done) VALUES (?,?,?,?,?)",
        ("hook", json.dumps({"state": "firing", "rule": "kl-small"}), now, "sent", now),
    )
    db.commit()
    db.close()


def test_an_old_pickle_state_is_migrated_without_unpickling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hook = Recorder()
    config = load_config(str(write_config(
        tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.1}],
        interval=0.1, jitter=0,
    )))
    run = tmp_path / "runs" / "r.jsonl"
    _rows(run, range(20), bad_at=5, end=True)
    _write_old_state(Path(config.state), str(run), time.time())
    caplog.set_level(logging.WARNING, logger="gatekeeper.daemon")
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        assert _wait(lambda: any(w.ended for w in daemon.scheduler.snapshot()))
        (w,) = daemon.scheduler.snapshot()
        assert w.points == 40  # re-read from the start: the old cursor was dropped
        kl = next(r for r in w.verdict["results"] if r["rule"] == "kl-small")
        assert (w.status, kl["status"], kl["step"]) == ("fail", "fail", 5)
        time.sleep(0.5)
        assert hook.bodies == []  # already sent before the migration: not sent again
    finally:
        daemon.stop()
        hook.close()
    assert UNPICKLED == []
    migrated = [r.message for r in caplog.records if "migrated from schema 1" in r.message]
    assert len(migrated) == 1 and "1 run(s) are re-read" in migrated[0]
    db = sqlite3.connect(config.state)
    (version,) = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    (blob, state) = db.execute("SELECT evaluation, state FROM runs").fetchone()
    db.close()
    assert version == "2" and blob is None
    assert json.loads(state)["format"] == "gatekeeper-run-state"


def _judged_state(tmp_path: Path) -> tuple[object, str]:
    config = load_config(str(write_config(tmp_path, interval=0.1, jitter=0)))
    run = tmp_path / "runs" / "r.jsonl"
    _rows(run, range(10), bad_at=5)
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        assert _wait(lambda: any(w.points == 20 for w in daemon.scheduler.snapshot()))
    finally:
        daemon.stop()
    return config, str(run)


def _tamper(path: str, change: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"UPDATE runs SET state = {change}")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("'{not json'", "its state is not JSON"),
        ("json_set(state, '$.state_version', 99)", "its state has version 99"),
        ("json_set(state, '$.evaluation.rules[0].tracker.selection.seen', 'os.system')",
         r"evaluation.rules\[0\].tracker.selection.seen: expected an integer"),
        ("json_set(state, '$.evaluation.rules[0].tracker.judgement.context', "
         "json('{\"dtype\": \"O\", \"b64\": \"\"}'))", "bad array dtype"),
    ],
)
def test_a_tampered_state_is_refused_naming_the_run_and_the_way_out(
    tmp_path: Path, change: str, message: str
) -> None:
    config, key = _judged_state(tmp_path)
    _tamper(config.state, change)  # type: ignore[attr-defined]
    before = Path(config.state).read_bytes()  # type: ignore[attr-defined]
    with pytest.raises(StateError, match=message) as err:
        Daemon(config, open_test_source)  # type: ignore[arg-type]
    assert f"run {key}" in str(err.value) and f"--reset-state {key}" in str(err.value)
    assert Path(config.state).read_bytes() == before  # never reset on its own  # type: ignore[attr-defined]
    daemon = Daemon(config, open_test_source, reset_state=(key,))  # type: ignore[arg-type]
    daemon.start()
    try:
        assert _wait(lambda: any(w.points == 20 for w in daemon.scheduler.snapshot()))
    finally:
        daemon.stop()


def _stored(path: str, query: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


def test_a_state_of_an_older_layout_is_re_read_from_its_source(tmp_path: Path) -> None:
    """A gatekeeper upgrade that changes the judging state's layout (STATE_VERSION) does
    not stop the daemon: the run is re-read from its source and judged alike, its rule
    and alert rows kept (no alert sent twice), its point count not doubled."""
    config, key = _judged_state(tmp_path)
    path: str = config.state  # type: ignore[attr-defined]
    rules = _stored(path, "SELECT policy, rule, status, since FROM rules ORDER BY rule")
    (verdict,) = _stored(path, "SELECT verdict FROM runs")
    _tamper(path, "json_set(state, '$.state_version', 1)")
    daemon = Daemon(config, open_test_source)  # type: ignore[arg-type]
    daemon.start()
    try:
        stored = "SELECT json_extract(state, '$.state_version'), points FROM runs"
        assert _wait(lambda: _stored(path, stored) == [(STATE_VERSION, 20)])
    finally:
        daemon.stop()
    assert _stored(path, "SELECT policy, rule, status, since FROM rules ORDER BY rule") == rules
    (again,) = _stored(path, "SELECT verdict FROM runs")
    judged = [(r["rule"], r["status"], r["judged"]) for r in json.loads(verdict[0])["results"]]
    assert [
        (r["rule"], r["status"], r["judged"]) for r in json.loads(again[0])["results"]
    ] == judged


def test_kill9_and_restart_resume_from_the_saved_state(tmp_path: Path) -> None:
    hook = Recorder()
    config = write_config(
        tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.1}],
        interval=0.1, jitter=0,
    )
    run = tmp_path / "runs" / "r.jsonl"
    _rows(run, range(20), bad_at=5)
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: (daemon.run("r") or {}).get("points") == 40), daemon.tail()
        assert hook.wait(lambda: len(hook.bodies) == 1)
        before = daemon.run("r")
        daemon.kill9()
        daemon.start()
        time.sleep(1.0)
        after = daemon.run("r")
        assert after["verdict"] == before["verdict"] and after["points"] == 40
        _rows(run, range(20, 30), bad_at=5, end=True)
        assert daemon.wait(lambda: daemon.run("r")["ended"]), daemon.tail()
        final = daemon.run("r")
        kl = next(r for r in final["verdict"]["results"] if r["rule"] == "kl-small")
        assert (final["points"], kl["status"], kl["step"]) == (60, "fail", 5)
        assert kl["judged"] == 30  # every point judged once: the state resumed, not re-read
        time.sleep(0.5)
        assert len(hook.bodies) == 1  # the alert dedup survived the kill
    finally:
        daemon.stop()
        hook.close()
