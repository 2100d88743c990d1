"""Three `gatekeeper serve` replicas (child processes) sharing ~100 runs on a real
PostgreSQL state: each run is polled by one replica; a replica killed with -9 loses its
runs when its leases expire and the others take them over from the committed cursor;
an alert is sent once whichever replica judged the point."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from tests.daemon.harness import POLICY, DaemonProcess, free_port
from tests.daemon.recorder import Recorder
from tests.daemon.test_serve import firing_lines

RUNS = 96
LEASE = 3.0


def replica_config(tmp: Path, i: int, url: str, hook: str) -> Path:
    home = tmp / f"replica{i}"
    home.mkdir()
    config = {
        "state": url,
        "http": {"port": free_port()},
        "poll": {"interval": 1.0, "jitter": 0.1, "timeout": 5, "discovery_interval": 1.0,
                 "lease": LEASE},
        "targets": [{"glob": str(tmp / "runs" / "*.jsonl"), "policies": [str(tmp / "kl.yaml")]}],
        "notifiers": [{"name": "hook", "kind": "webhook", "url": hook, "group_wait": 0.2}],
    }  # fmt: skip
    path = home / "gatekeeper.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def append(path: Path, step: int, kl: float = 0.001) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps({"train/step": step, "train/ppo_kl": kl, "train/loss": 1.0}) + "\n")


def held(replicas: list[DaemonProcess]) -> dict[str, list[str]]:
    """run name -> the replicas listing it in /api/runs (by the name they report)."""
    out: dict[str, list[str]] = {}
    for r in replicas:
        answer = None
        for _ in range(3):  # a loaded machine may time one request out
            answer = r.api("/api/runs")
            if answer is not None:
                break
        assert answer is not None, r.tail()
        for run in answer["runs"]:
            out.setdefault(run["name"], []).append(run["replica"])
    return out


def stored(url: str) -> dict[str, tuple[int, float]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT key, points, updated FROM gkd_runs").fetchall()
    return {Path(k).stem: (int(p), float(u or 0)) for k, p, u in rows}


def wait(pred: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_three_replicas_share_the_runs_and_take_over_a_killed_ones(
    tmp_path: Path, pg_url: str
) -> None:
    hook = Recorder()
    (tmp_path / "runs").mkdir()
    (tmp_path / "kl.yaml").write_text(POLICY)
    runs = [tmp_path / "runs" / f"run{i:03d}.jsonl" for i in range(RUNS)]
    steps = 0
    for path in runs:
        append(path, 0)
    env = [{"GATEKEEPER_REPLICA": f"rep-{i}"} for i in range(3)]
    fleet = [DaemonProcess(replica_config(tmp_path, i, pg_url, hook.url), env[i]) for i in range(3)]
    try:
        for replica in fleet:
            replica.start()

        def balanced() -> bool:
            found = held(fleet)
            counts = Counter(r for names in found.values() for r in names)
            return len(found) == RUNS and all(20 <= counts[f"rep-{i}"] <= 45 for i in range(3))

        assert wait(balanced, 60), (Counter(len(v) for v in held(fleet).values()), fleet[0].tail())
        found = held(fleet)
        assert all(len(names) == 1 for names in found.values()), found  # one replica each
        for _ in range(3):  # new points, a bad one on run 1: polled once, alerted once
            steps += 1
            for n, path in enumerate(runs):
                append(path, steps, 0.5 if n == 1 and steps == 2 else 0.001)
            time.sleep(1.0)
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 1, 20)

        victim = fleet[1]
        theirs = sorted(name for name, names in held(fleet).items() if names == ["rep-1"])
        bad_run = runs[int(theirs[0].removeprefix("run"))]
        victim.kill9()
        killed = time.time()
        steps += 1
        for path in runs:  # written during the takeover: one of the victim's runs goes bad
            append(path, steps, 0.5 if path == bad_run else 0.001)
        survivors = [fleet[0], fleet[2]]

        def taken_over() -> bool:
            now = stored(pg_url)
            return all(now[name][1] > killed for name in theirs)

        assert wait(taken_over, 2 * LEASE + 2), (len(theirs), survivors[0].tail())
        took = max(stored(pg_url)[name][1] for name in theirs) - killed
        print(f"takeover of {len(theirs)} runs: {took:.2f}s after the kill (lease {LEASE}s)")
        assert took <= 2 * LEASE, took
        assert wait(lambda: len(held(survivors)) == RUNS, 10), held(survivors)
        found = held(survivors)
        assert all(len(v) == 1 for v in found.values()), found

        def complete() -> bool:
            now = stored(pg_url)
            return len(now) == RUNS and all(p == 2 * (steps + 1) for p, _ in now.values())

        assert wait(complete, 30), Counter(p for p, _ in stored(pg_url).values())
        expected = {("run001", "kl-small", "firing"): 1, (bad_run.stem, "kl-small", "firing"): 1}
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 2, 20)
        time.sleep(2.0)
        assert firing_lines(hook.bodies) == expected
        before = stored(pg_url)
        for replica in fleet:  # all of them restarted: nothing lost, nothing sent again
            replica.stop()
        for replica in fleet:
            replica.start()
        assert wait(lambda: len(held(fleet)) == RUNS, 30), fleet[0].tail()
        time.sleep(2.0)
        assert {k: p for k, (p, _) in stored(pg_url).items()} == {
            k: p for k, (p, _) in before.items()
        }
        assert firing_lines(hook.bodies) == expected
    finally:
        for replica in fleet:
            replica.stop()
        hook.close()


def test_a_stalled_replica_that_comes_back_commits_nothing_for_runs_taken_over(
    tmp_path: Path, pg_url: str
) -> None:
    """SIGSTOP stands for a replica cut off or stalled past its leases: when it resumes,
    its polls of runs the other replica took are refused by the lease check in the
    commit, so no point is counted twice and no alert created twice."""
    hook = Recorder()
    (tmp_path / "runs").mkdir()
    (tmp_path / "kl.yaml").write_text(POLICY)
    runs = [tmp_path / "runs" / f"run{i:03d}.jsonl" for i in range(24)]
    for path in runs:
        append(path, 0)
    fleet = [
        DaemonProcess(
            replica_config(tmp_path, i, pg_url, hook.url), {"GATEKEEPER_REPLICA": f"rep-{i}"}
        )
        for i in range(2)
    ]
    try:
        for replica in fleet:
            replica.start()
        assert wait(
            lambda: (
                len(held(fleet)) == 24
                and {n for v in held(fleet).values() for n in v} == {"rep-0", "rep-1"}
            ),
            40,
        )
        stalled = fleet[0]
        theirs = sorted(n for n, names in held(fleet).items() if names == ["rep-0"])
        assert stalled.proc is not None
        stalled.proc.send_signal(signal.SIGSTOP)
        stopped = time.time()
        for path in runs:  # new data while it is stalled; one of its runs goes bad
            append(path, 1, 0.5 if path.stem == theirs[0] else 0.001)
        assert wait(lambda: all(stored(pg_url)[n][1] > stopped for n in theirs), 4 * LEASE), fleet[
            1
        ].tail()
        for path in runs:  # more data for the stalled one to find when it resumes
            append(path, 2)
        stalled.proc.send_signal(signal.SIGCONT)
        assert wait(lambda: all(p == 6 for p, _ in stored(pg_url).values()), 30), stored(pg_url)
        time.sleep(2 * LEASE)  # the resumed replica has polled, been refused, rebalanced
        assert all(p == 6 for p, _ in stored(pg_url).values()), stored(pg_url)  # none doubled
        found = held(fleet)
        assert len(found) == 24 and all(len(v) == 1 for v in found.values()), found
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 1, 20)
        time.sleep(1.0)
        assert firing_lines(hook.bodies) == {(theirs[0], "kl-small", "firing"): 1}
    finally:
        for replica in fleet:
            if replica.proc is not None and replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGCONT)
            replica.stop()
        hook.close()
