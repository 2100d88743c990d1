"""The scheduler in-process: a hung source is timed out and does not stall the others."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import write_config
from tests.daemon.sources import HangingSource, open_test_source
from tests.helpers import wait_until


def rows(path: Path, kl: list[float]) -> None:
    with open(path, "a") as fh:
        for step, v in enumerate(kl):
            fh.write(json.dumps({"train/step": step, "train/ppo_kl": v, "train/loss": 1.0}) + "\n")


def test_a_hanging_source_times_out_while_other_runs_keep_being_judged(tmp_path: Path) -> None:
    config = load_config(
        str(write_config(tmp_path, interval=0.2, jitter=0, timeout=0.5, workers=2))
    )
    HangingSource.release.clear()
    runs = tmp_path / "runs"
    rows(runs / "hang.jsonl", [0.0])
    rows(runs / "ok.jsonl", [0.0, 0.0])
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        watchers = lambda: {w.name: w for w in daemon.scheduler.snapshot()}  # noqa: E731
        assert wait_until(lambda: watchers().get("ok") is not None and watchers()["ok"].points == 4)
        assert wait_until(lambda: watchers()["hang"].errors >= 1)
        hung = watchers()["hang"]
        assert hung.summary()["hung"] and "timed out after 0.5s" in (hung.last_error or "")
        rows(runs / "ok.jsonl", [0.5])  # the healthy run goes on being polled meanwhile
        assert wait_until(lambda: watchers()["ok"].status == "fail")
        assert daemon.metrics.poll_errors.labels(kind="timeout")._value.get() >= 1
        assert hung.next_allowed > 0  # backing off, not hammering the stuck source
        HangingSource.release.set()  # the source recovers: its run is judged after backoff
        assert wait_until(lambda: watchers()["hang"].points == 2, timeout=20)
        assert watchers()["hang"].status == "pass" and watchers()["hang"].errors == 0
    finally:
        HangingSource.release.set()
        daemon.stop()


def test_stopping_while_a_poll_drops_its_run_does_not_hang(tmp_path: Path) -> None:
    """APScheduler's shutdown holds its job-store lock while it waits for the jobs in
    flight; a job that then removed a run's job (the run ended, its lease was lost) or
    added one (a lease taken) waited for that lock for ever, and `serve` never exited on
    SIGTERM (seen with 3,000 runs in bench_fleet.py). Now stop() returns."""
    config = load_config(str(write_config(tmp_path, interval=0.2, jitter=0, workers=2)))
    rows(tmp_path / "runs" / "a.jsonl", [0.0])
    daemon = Daemon(config, open_test_source)
    sched = daemon.scheduler
    entered, release = threading.Event(), threading.Event()

    def poll_then_drop(key: str, watcher: object) -> None:
        entered.set()
        release.wait(10)
        sched._unwatch(key)  # as a poll whose lease was lost does
        sched._watch(key + ".new", watcher.watched)  # type: ignore[attr-defined]  # taken

    sched._poll_one = poll_then_drop  # type: ignore[method-assign]
    daemon.start()
    stopper = threading.Thread(target=daemon.stop, daemon=True)
    try:
        assert entered.wait(10)
        stopper.start()
        time.sleep(0.3)  # stop() is waiting for the poll in flight
        release.set()
        stopper.join(10)
        assert not stopper.is_alive(), "stop() hung on the poll that removed its job"
    finally:
        release.set()
