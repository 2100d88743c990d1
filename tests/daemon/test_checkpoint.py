"""`poll.checkpoint`: polls that change nothing seen outside stay in memory, ahead of the
store, and are committed together (issue 28: a steady poll's commit was half its cost).

Each test follows a real JSONL file written the way a trainer writes it, with the
daemon's own `RunWatcher` on a real SQLite state file and the shipped policies, or a
real `gatekeeper serve` child. What must hold: a status change and an alert are
committed at once; a held poll is committed at the checkpoint, at a clean stop, and when
the run is handed back; a crash re-reads the held polls from the committed cursor and
ends where committing every poll ends; the API shows the poll held in memory.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.daemon import scheduler
from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon, fingerprint, load_targets
from gatekeeper.daemon.state import StateStore
from gatekeeper.daemon.watch import ChannelRule, RunWatcher, Watched
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.sources import open_live_source
from tests.daemon.harness import DaemonProcess, write_config, writer
from tests.daemon.recorder import Recorder
from tests.daemon.replica_scenario import api_runs
from tests.daemon.sources import open_test_source
from tests.daemon.test_bounded_state import CONFIG, SHIPPED, _append, _check, _results, _sidecar
from tests.daemon.test_replicas import (
    STALL_LEASE,
    append,
    once_each,
    resume_and_stop,
    stored,
    two_replicas,
)
from tests.daemon.test_serve import kill9_at_random_moments
from tests.helpers import wait_until

HOOK = ChannelRule("hook", frozenset({"fail", "error"}), 0.0)


def _watcher(
    db: Path,
    path: Path | str,
    checkpoint: float,
    channels: tuple[ChannelRule, ...] = (HOOK,),
    policies: list[PolicySpec] | None = None,
) -> RunWatcher:
    """A watcher of `path` (a file or a source spec) on the SQLite store `db`, judging by
    `policies` (the shipped ones by default)."""
    policies = policies or load_policies(SHIPPED)
    watched = Watched(
        target="t", policies=policies, fingerprint=fingerprint(policies), tags=(),
        interval=10, debounce=1, channels=list(channels), open_source=open_live_source,
        checkpoint=checkpoint,
    )
    store = StateStore(str(db))
    return RunWatcher(str(path), watched, store, record=store.load_runs().get(str(path)))


def _row(db: Path) -> dict[str, Any]:
    """The run's committed row, read by another connection."""
    with sqlite3.connect(db) as conn:
        cur = conn.execute("SELECT cursor, points, polls, status, state, verdict FROM runs")
        cursor, points, polls, status, state, verdict = cur.fetchone()
        outbox = conn.execute("SELECT count(*) FROM alerts").fetchone()[0]
    return {"cursor": json.loads(cursor), "points": points, "polls": polls,
            "status": status, "state": state, "verdict": json.loads(verdict), "outbox": outbox}


def _run(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.jsonl"
    _sidecar(path, CONFIG)
    _append(path, 0, 50)
    return path


def test_steady_polls_are_held_until_the_checkpoint_and_the_api_shows_them(
    tmp_path: Path,
) -> None:
    path, db = _run(tmp_path, "r"), tmp_path / "state.db"
    w = _watcher(db, path, checkpoint=60)  # this run's period: 30-60 s, by its key
    w.apply(w.fetch(), 0.0)  # a run's first poll is committed
    first = _row(db)
    assert (first["points"], first["polls"]) == (250, 1)
    for i, now in enumerate((10.0, 20.0), start=1):
        _append(path, 50 + 10 * (i - 1), 50 + 10 * i)
        assert w.apply(w.fetch(), now) == []
        assert w.held is not None and w.cursor != first["cursor"]
        assert _row(db) == first  # nothing written
        assert w.current_verdict()["run"]["points"] == 250 + 50 * i  # the API's view
        assert w.summary()["points"] == 250 + 50 * i
    _append(path, 70, 80)
    w.apply(w.fetch(), 60.0)  # a whole checkpoint after the last commit
    row = _row(db)
    assert w.held is None and (row["points"], row["polls"]) == (400, 4)
    assert row["cursor"] == w.cursor
    assert row["verdict"] == json.loads(json.dumps(w.current_verdict()))
    assert row["status"] == w.status


@pytest.mark.parametrize("channels", [(HOOK,), ()], ids=["alerted", "no-channel"])
def test_a_rule_status_change_and_its_alert_are_committed_at_once(
    tmp_path: Path, channels: tuple[ChannelRule, ...]
) -> None:
    """With no channel nothing is due: the rule's row alone makes the poll committed."""
    path, db = _run(tmp_path, "r"), tmp_path / "state.db"
    w = _watcher(db, path, checkpoint=3600, channels=channels)
    w.apply(w.fetch(), 0.0)
    _append(path, 50, 60)
    w.apply(w.fetch(), 10.0)
    assert w.held is not None
    before = _row(db)["outbox"]  # the first poll's alerts (rules in error)
    _append(path, 60, 70, bad={("train/ppo_kl", 65): float("nan")})
    due = w.apply(w.fetch(), 20.0)
    # the run was `error` already (ci-consistency: a config key it lacks): one rule's
    # status moved, not the run's
    row = _row(db)
    assert w.held is None and row["status"] == "error" and row["polls"] == 3
    assert len(due) == len(channels) and row["outbox"] == before + len(channels)
    assert row["cursor"] == w.cursor
    with sqlite3.connect(db) as conn:
        (status,) = conn.execute("SELECT status FROM rules WHERE rule = 'ppo-kl-finite'").fetchone()
    assert status == "error"


def test_a_crash_reads_the_held_polls_again_and_ends_where_committing_every_poll_ends(
    tmp_path: Path,
) -> None:
    """Two stores follow one file: every poll committed, and held polls (an hour's
    checkpoint) lost to a crash twice; at the end both hold the same verdict, the one
    `check` gives on the whole file, and the same judging state, to the byte."""
    path = _run(tmp_path, "r")
    every, held = tmp_path / "every.db", tmp_path / "held.db"
    a, b = _watcher(every, path, 0), _watcher(held, path, 3600)
    now = 0.0
    for start in range(50, 200, 10):
        now += 10
        _append(path, start, start + 10, bad={("train/ppo_kl", 155): float("nan")})
        a.apply(a.fetch(), now)
        b.apply(b.fetch(), now)
        if start in (100, 170):  # the held process dies (its store is what a new one reads)
            assert b.held is not None
            b.store.close()
            b = _watcher(held, path, 3600)
    assert b.held is not None
    with open(path, "a") as fh:  # the run ends: both judge it whole and commit
        fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")
    a.apply(a.fetch(), now + 10)
    b.apply(b.fetch(), now + 10)
    assert b.held is None and b.ended
    ra, rb = _row(every), _row(held)
    assert rb["points"] == ra["points"] == 1000
    assert rb["status"] == ra["status"] == "error"
    assert rb["verdict"]["results"] == ra["verdict"]["results"]
    assert _results(rb["verdict"]["results"]) == _check(path)
    assert rb["state"] == ra["state"]
    assert rb["outbox"] == ra["outbox"]  # the NaN alerted once, the first poll's errors once
    assert rb["polls"] < ra["polls"] == 16  # the crashes lost polls, never points


def test_a_flush_writes_the_held_rows_messages(tmp_path: Path) -> None:
    """A rule row whose message moved in a held poll (and not in the flushed one) is
    written by the flush: the store's rows are the API's."""
    path, db = _run(tmp_path, "r"), tmp_path / "state.db"
    w = _watcher(db, path, checkpoint=3600)
    w.apply(w.fetch(), 0.0)
    _append(path, 50, 60)
    w.apply(w.fetch(), 10.0)
    assert w.unsaved  # some messages name the last value
    w.flush(20.0)
    with sqlite3.connect(db) as conn:
        stored = {(p, r): m for p, r, m in conn.execute("SELECT policy, rule, message FROM rules")}
    assert stored == {k: r.message for k, r in w.rules.items()}


# ---- a real daemon ------------------------------------------------------------------------
def _committed_points(tmp: Path, name: str) -> int:
    with sqlite3.connect(tmp / "state" / "gatekeeper.db") as conn:
        rows = conn.execute("SELECT key, points FROM runs").fetchall()
    return next((p for k, p in rows if k.endswith(f"{name}.jsonl")), 0)


def test_a_clean_stop_commits_what_the_polls_held(tmp_path: Path) -> None:
    config = write_config(tmp_path, interval=0.1, jitter=0, checkpoint="1h")
    daemon = DaemonProcess(config).start()
    kid = writer(tmp_path / "runs" / "r.jsonl", "--steps", "400", "--period", "0.02")
    try:
        assert daemon.wait(lambda: (daemon.run("r") or {}).get("points", 0) >= 100), daemon.tail()
        run = daemon.run("r")
        assert _committed_points(tmp_path, "r") < run["points"]  # held, ahead of the store
        assert run["held_polls"] > 0 and daemon.metric("gatekeeper_polls_held") > 0
    finally:
        kid.kill()
        kid.wait()
    time.sleep(0.5)  # the last rows read
    shown = daemon.run("r")["points"]
    assert daemon.stop() == 0
    assert "committing the polls 1 runs hold in memory" in daemon.tail(), daemon.tail()
    assert _committed_points(tmp_path, "r") == shown


def test_kill9_with_polls_held_loses_no_point_and_sends_no_alert_twice(tmp_path: Path) -> None:
    """test_serve's kill -9 at random moments, with every steady poll held (a checkpoint
    of an hour): each life re-reads what the last one held; an ended run is committed."""
    kill9_at_random_moments(tmp_path, seed=28, checkpoint=3600)
    assert [_committed_points(tmp_path, f"r{i}") for i in range(3)] == [120, 120, 120]


def test_a_replica_hands_back_its_runs_with_their_held_polls_committed(
    tmp_path: Path, pg_url: str
) -> None:
    """rep-0 alone holds 24 runs with polls held in memory (an hour's checkpoint); when
    rep-1 joins, rep-0 hands half back and commits their held polls first, so rep-1
    resumes where rep-0 had read to and reads no point again."""
    hook = Recorder()
    runs, fleet = two_replicas(tmp_path, pg_url, hook, 24)
    for replica in fleet:
        config = json.loads(replica.config.read_text())
        config["poll"]["checkpoint"] = 3600
        replica.config.write_text(json.dumps(config))
    first, second = fleet
    try:
        first.start()
        assert wait_until(lambda: {r["points"] for r in api_runs(first)} == {2}, 30)
        for step in (1, 2):
            for path in runs:
                append(path, step)
        assert wait_until(lambda: {r["points"] for r in api_runs(first)} == {6}, 30)
        assert {p for p, _ in stored(pg_url).values()} == {2}  # held by rep-0, not stored
        second.start()
        found: dict[str, list[str]] = {}
        both = {"rep-0", "rep-1"}
        shared = lambda: (  # noqa: E731
            once_each(fleet, found, 24) and {n for v in found.values() for n in v} == both
        )
        assert wait_until(shared, 6 * STALL_LEASE), found
        theirs = [n for n, names in found.items() if names == ["rep-1"]]
        assert "committing its held poll failed" not in first.log.read_text()
        assert second.metric("gatekeeper_points_ingested_total") == 0  # nothing read again
        assert all(stored(pg_url)[n][0] == 6 for n in theirs), stored(pg_url)
        assert {r["points"] for r in api_runs(second)} == {6}
    finally:
        resume_and_stop(fleet, hook)
    assert {p for p, _ in stored(pg_url).values()} == {6}  # rep-0's stop committed the rest


def _steps(path: Path, start: int, stop: int) -> None:
    """Rows of the harness's kl policy's two metrics (2 points a step)."""
    with open(path, "a") as fh:
        for step in range(start, stop):
            fh.write(json.dumps({"train/step": step, "train/ppo_kl": 0.001, "train/loss": 1.0}))
            fh.write("\n")


def test_a_stop_spends_at_most_its_budget_on_held_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An in-process daemon whose runs hold polls, each commit slowed to 0.3 s: the stop
    commits what fits in its budget (0.5 s here, 15 s in serve), says how many it left,
    and those runs are read again from their committed cursor after a restart."""
    config = load_config(str(write_config(tmp_path, interval=0.1, jitter=0, checkpoint=3600)))
    runs = [tmp_path / "runs" / f"r{i}.jsonl" for i in range(4)]
    for path in runs:
        _steps(path, 0, 3)
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        watchers = lambda: daemon.scheduler.snapshot()  # noqa: E731
        assert wait_until(lambda: len(watchers()) == 4 and all(w.points == 6 for w in watchers()))
        for path in runs:
            _steps(path, 3, 5)
        assert wait_until(lambda: all(w.held_polls > 0 and w.points == 10 for w in watchers()))
    finally:
        monkeypatch.setattr(scheduler, "FLUSH_SECONDS", 0.5)
        slow = StateStore.commit_poll
        monkeypatch.setattr(
            StateStore, "commit_poll", lambda self, c: (time.sleep(0.3), slow(self, c))[1]
        )
        with caplog.at_level(logging.INFO, logger="gatekeeper.daemon"):
            daemon.stop()
    assert "committing the polls 4 runs hold in memory" in caplog.text
    assert "2 runs' held polls not committed within 0.5s" in caplog.text
    db = tmp_path / "state" / "gatekeeper.db"
    with sqlite3.connect(db) as conn:
        points = sorted(p for (p,) in conn.execute("SELECT points FROM runs"))
    assert points == [6, 6, 10, 10]  # two committed in the budget, two left as committed
    monkeypatch.undo()
    again = Daemon(load_config(str(tmp_path / "gatekeeper.yaml")), open_test_source)
    again.start()
    try:  # the two left are read again from their committed cursor: nothing lost
        found = lambda: again.scheduler.snapshot()  # noqa: E731
        assert wait_until(lambda: len(found()) == 4 and all(w.points == 10 for w in found()))
    finally:
        again.stop()


def test_a_checkpoint_under_twice_the_interval_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short = load_config(str(write_config(tmp_path, interval=30, checkpoint="45s")))
    with caplog.at_level(logging.WARNING, logger="gatekeeper.daemon"):
        load_targets(short, open_test_source)
    assert "poll.checkpoint (45s) is under twice its poll interval (30s)" in caplog.text
    caplog.clear()
    fine = load_config(str(write_config(tmp_path, interval=30, checkpoint="1m")))
    with caplog.at_level(logging.WARNING, logger="gatekeeper.daemon"):
        load_targets(fine, open_test_source)
    assert "poll.checkpoint" not in caplog.text


LOSS = "  - {{id: loss-bounded, metric: {}, check: {{max: 2.0}}}}\n"
LR = "  - {{id: lr-finite, metric: {}, check: {{finite: true}}}}\n"


def _loss(step: int) -> float:
    return 9.0 if step == 75 else 1.0 / (step + 1)


def _crash_twice(
    tmp: Path,
    log_chunk: Callable[[int], str],
    end: Callable[[], None],
    loss: str = "train/loss",
    lr: str | None = "train/lr",
) -> None:
    """Two stores follow one run of a real writer, 10 steps of metric `loss` (and of
    `lr`) a chunk (`log_chunk(chunk)`: the run's source spec): one committed every poll,
    one holding its polls (an hour's checkpoint) and lost to a crash twice, re-read by
    its source from the committed cursor. After `end()` both hold the same state to the
    byte, the same verdict and one alert for the bad loss at step 75."""
    rules = LOSS.format(loss) + (LR.format(lr) if lr else "")
    (tmp / "two.yaml").write_text("version: 1\nname: two\nrules:\n" + rules)
    policies = load_policies([str(tmp / "two.yaml")])
    every, held = tmp / "every.db", tmp / "held.db"
    a = b = None
    now = 0.0
    for chunk in range(12):
        spec = log_chunk(chunk)
        now += 10
        a = a or _watcher(every, spec, 0, policies=policies)
        b = b or _watcher(held, spec, 3600, policies=policies)
        a.apply(a.fetch(), now)
        b.apply(b.fetch(), now)
        if chunk in (4, 10):  # the held process dies; a new one reads its store
            assert b.held is not None
            b.store.close()
            b = None
    end()
    assert a is not None and b is not None and b.held is not None
    a.apply(a.fetch(), now + 10)
    b.apply(b.fetch(), now + 10)
    b.flush(now + 10)
    ra, rb = _row(every), _row(held)
    assert rb["points"] == ra["points"] == (240 if lr else 120)
    assert rb["status"] == ra["status"] == "fail"
    assert rb["verdict"]["results"] == ra["verdict"]["results"]
    loss = next(r for r in rb["verdict"]["results"] if r["rule"] == "loss-bounded")
    assert (loss["status"], loss["step"]) == ("fail", 75)
    assert rb["state"] == ra["state"]
    assert rb["outbox"] == ra["outbox"] == 1  # the bad loss at step 75, alerted once
    assert rb["polls"] < ra["polls"]


def test_held_polls_of_a_tensorboard_run_written_by_torch_survive_two_crashes(
    tmp_path: Path,
) -> None:
    """On torch 2.13's `torch.utils.tensorboard.SummaryWriter`, flushed after each chunk
    as a trainer's logging step does, read by the TensorBoard live source."""
    summary = pytest.importorskip("torch.utils.tensorboard")
    run = tmp_path / "run"
    writer = summary.SummaryWriter(str(run))

    def log_chunk(chunk: int) -> str:
        for step in range(10 * chunk, 10 * chunk + 10):
            writer.add_scalar("train/loss", _loss(step), step)
            writer.add_scalar("train/lr", 1e-4, step)
        writer.flush()
        return f"tensorboard://{run}"

    _crash_twice(tmp_path, log_chunk, writer.close)


def test_held_polls_of_an_mlflow_run_survive_two_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file store written by mlflow 3.17's client (`log_batch` a chunk, the run
    ended FINISHED), read by the MLflow live source, whose per-metric cursor the held
    polls' re-read restores."""
    tracking = pytest.importorskip("mlflow.tracking")
    entities = pytest.importorskip("mlflow.entities")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 file stores: opt-in
    uri = f"file://{tmp_path / 'mlruns'}"
    client = tracking.MlflowClient(uri)
    run_id = client.create_run("0", run_name="held").info.run_id

    def log_chunk(chunk: int) -> str:
        at = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[
            entities.Metric(name, value, at, step)
            for step in range(10 * chunk, 10 * chunk + 10)
            for name, value in (("train/loss", _loss(step)), ("train/lr", 1e-4))
        ])  # fmt: skip
        return f"mlflow+{uri}/runs/{run_id}"

    _crash_twice(tmp_path, log_chunk, lambda: client.set_terminated(run_id, "FINISHED"))


def test_held_polls_of_a_wandb_run_survive_two_crashes(tmp_path: Path) -> None:
    """On the `.wandb` file the wandb SDK (0.31, offline) wrote for 120 steps of
    `train/loss` (5.0 at step 75; tests/sources/family_writer.py), followed as it grows:
    twelve prefixes of its bytes, cut anywhere (inside a record too, as a reader of a
    live run finds it), then the whole file with its exit record."""
    pytest.importorskip("wandb")
    from tests.wandb.conftest import sdk_env

    work = tmp_path / "work"
    subprocess.run(
        [sys.executable, str(Path(__file__).parents[1] / "sources" / "family_writer.py"),
         "wandb", str(work), "--stop", "120", "--bad-at", "75"],
        env={**sdk_env(work), "PYTHONPATH": str(Path(__file__).parents[2])},
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    (written,) = (work / "wandb").glob("offline-run-*/run-*.wandb")
    data = written.read_bytes()
    follow = tmp_path / "follow" / written.parent.name / written.name
    follow.parent.mkdir(parents=True)

    def grow_to(size: int) -> str:
        with open(follow, "ab") as fh:
            fh.write(data[follow.stat().st_size if follow.exists() else 0 : size])
        return str(follow)

    cuts = [len(data) * (chunk + 1) // 13 + 7 for chunk in range(12)]
    _crash_twice(tmp_path, lambda chunk: grow_to(cuts[chunk]), lambda: grow_to(len(data)), lr=None)


def test_held_polls_of_a_prometheus_series_survive_two_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a real Prometheus (Debian's 2.42) whose TSDB holds `train_loss` and `train_lr`
    of one run, every 15 s (backfilled by its promtool), read by the Prometheus live
    source in raw-sample mode. The source's clock is the test's, stepped 10 samples a
    poll, so both stores see the same samples at the same poll; the held polls' re-read
    restores its cursor (`done`, each series' count and newest time)."""
    from gatekeeper.sources.prometheus import source as prom_source
    from tests.sources.prom_server import MISSING, PROMETHEUS, PROMTOOL, prometheus

    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip(MISSING)
    t0 = int(time.time()) - 3 * 3600
    lines = ["# TYPE train_loss gauge", "# TYPE train_lr gauge"]
    for i in range(120):
        lines += [f'train_loss{{run="ck"}} {_loss(i)!r} {t0 + 15 * i}',
                  f'train_lr{{run="ck"}} 0.0001 {t0 + 15 * i}']  # fmt: skip
    clock = {"now": float(t0)}
    monkeypatch.setattr(prom_source, "time", type("Clock", (), {"time": lambda: clock["now"]}))
    with prometheus(tmp_path, "\n".join([*lines, "# EOF", ""])) as url:
        end = t0 + 15 * 119
        spec = f"prom+{url}?selector={{run=\"ck\"}}&start={t0 - 1}&end={end}"

        def log_chunk(chunk: int) -> str:
            clock["now"] = t0 + 15 * 10 * (chunk + 1) - 7.5  # samples 0 .. 10 (chunk + 1) - 1
            return spec

        def ended() -> None:
            clock["now"] = end + prom_source.LATE + 1

        _crash_twice(tmp_path, log_chunk, ended, loss="train_loss", lr="train_lr")
