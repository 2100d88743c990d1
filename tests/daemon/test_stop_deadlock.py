"""Stopping while a job changes the schedule: APScheduler 3's `shutdown(wait=True)` holds
its job-store lock while it waits for the running jobs, and `add_job`/`remove_job` take
that lock, so a discovery (or, on a shared store, a lease cycle taking the runs of
replicas that just left) adding a run's job at that moment waited forever and the daemon
never stopped. bench/bench_replicas.py saw it as a replica still running 15 s after
SIGTERM when every replica was stopped at once (1 repetition in ~10)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gatekeeper import dburl
from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.lock import WriterLock
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import DaemonProcess, write_config
from tests.daemon.sources import open_test_source


def test_a_discovery_that_adds_a_run_while_the_daemon_stops_does_not_hang_it(
    tmp_path: Path,
) -> None:
    config = load_config(str(write_config(tmp_path, interval=0.2, discovery_interval=0.2)))
    new_run = tmp_path / "runs" / "late.jsonl"
    new_run.write_text(json.dumps({"train/step": 0, "train/loss": 1.0}) + "\n")
    listing, release = threading.Event(), threading.Event()

    def slow_listing() -> list[str]:  # the discovery job, caught inside its listing
        listing.set()
        release.wait(10)
        return [str(new_run)]

    daemon = Daemon(config, open_test_source)
    watched = daemon.scheduler.targets[0][0]
    daemon.scheduler.targets = [(watched, slow_listing)]
    daemon.start()
    stopper = threading.Thread(target=daemon.stop, daemon=True)
    try:
        assert listing.wait(10)
        stopper.start()  # shutdown now waits for the discovery job, holding its lock
        stopper.join(0.5)
        release.set()  # the job goes on to add the run's job
        stopper.join(10)
        assert not stopper.is_alive(), "the daemon did not stop: deadlocked in shutdown"
    finally:
        release.set()


def assert_stopped_cleanly(daemon: DaemonProcess) -> None:
    """The daemon, sent SIGTERM, exits 0 within 15 s and says so (else its threads)."""
    assert daemon.proc is not None
    try:
        code = daemon.proc.wait(15)
    except subprocess.TimeoutExpired:
        daemon.abort()
        tail = daemon.tail(8000)
        raise AssertionError(f"still running 15 s after SIGTERM:\n{tail}") from None
    assert code == 0, daemon.tail()
    assert "SIGTERM received" in daemon.tail() and "stopped;" in daemon.tail()


def test_a_burst_of_sigterms_stops_the_daemon_cleanly(tmp_path: Path) -> None:
    """A second SIGTERM while the first's handler ran re-entered `threading.Event.set`,
    whose lock that handler held, and the daemon hung for good (CI saw a replica still
    running 15 s after SIGTERM; the test harness sends two). A burst of them, spread
    over ~10 ms, hung 32 of 40 small processes with a handler of that kind, and this
    test's first daemon with the old handler (its threads: inside `Event.set`)."""
    rng = random.Random(7)
    for i in range(3):
        home = tmp_path / f"d{i}"
        home.mkdir()
        daemon = DaemonProcess(write_config(home)).start()
        assert daemon.proc is not None
        for _ in range(200):
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon.proc.pid, signal.SIGTERM)
            until = time.perf_counter() + rng.uniform(0, 100e-6)
            while time.perf_counter() < until:
                pass
        assert_stopped_cleanly(daemon)


_TGKILL = {"x86_64": 234, "aarch64": 131}  # the tgkill(2) system call's number


@pytest.mark.skipif(platform.machine() not in _TGKILL, reason="tgkill's number unknown here")
def test_a_sigterm_given_to_another_thread_than_the_main_one_stops_the_daemon(
    tmp_path: Path,
) -> None:
    """The kernel gives a process-directed signal to any thread that does not block it
    (after a SIGCONT it was not the main one). A signal caught on another thread only
    notes it for the main thread, which runs the handler at its next bytecode, and a
    main thread blocked waiting never got there: the daemon ran on. Here SIGTERM is
    given to another of its threads with tgkill(2), as the kernel may give it."""
    libc = ctypes.CDLL(None, use_errno=True)
    daemon = DaemonProcess(write_config(tmp_path)).start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the daemon runs threads besides its main one"
    assert libc.syscall(_TGKILL[platform.machine()], pid, others[0], signal.SIGTERM) == 0
    assert_stopped_cleanly(daemon)


def test_a_part_that_fails_to_stop_keeps_none_of_the_others_running(tmp_path: Path) -> None:
    """A bug in stopping one part (the HTTP server's EBADF was one) ended the stop there:
    the polls ran on, the state store stayed open and its lock held, so the next daemon
    on the file was refused until this process ended. Every other part now stops, and
    the first failure is raised after them (the CLI makes it exit 70)."""
    daemon = Daemon(load_config(str(write_config(tmp_path))), open_test_source)
    daemon.start()
    http_stop = daemon.http.stop

    def broken() -> None:
        raise RuntimeError("the HTTP server did not stop")

    daemon.http.stop = broken  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="did not stop"):
            daemon.stop()
        assert not daemon.scheduler.scheduler.running
        WriterLock.take(dburl.parse(daemon.config.state).path).release()  # free for the next
    finally:
        http_stop()
