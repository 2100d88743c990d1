"""Benchmark: what the daemon's dispatch of one poll costs, without the poll.

Two dispatchers, side by side, each around a poll that hands a no-op source read to a
second pool and waits on its future (a hung read must not hold a worker:
gatekeeper/daemon/scheduler.py), so the process CPU per poll is the dispatch alone:

- `apscheduler`: how `gatekeeper serve` dispatched polls before (one APScheduler interval
  job a run, 10 s, on a 4-thread executor, the `EVENT_JOB_SUBMITTED` listener that timed
  the poll's lag);
- `daemon`: the daemon's own `PollScheduler` (its dispatcher thread taking the due runs
  from its `DueQueue` and handing each to 4 poll workers), its `poll` replaced by the
  hand-off.

Usage: python bench/bench_dispatch.py [--runs 1000,3000,10000] [--seconds 30]
       [--dispatchers apscheduler,daemon]
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor as PollPool
from datetime import datetime, timedelta

from apscheduler.events import EVENT_JOB_SUBMITTED, JobSubmissionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

INTERVAL = 10.0


def window(done: list[int], seconds: float) -> tuple[int, float]:
    """(polls made, ms of process CPU per poll) over `seconds`, after one interval."""
    time.sleep(INTERVAL + 2)
    cpu0, polls0 = time.process_time(), done[0]
    time.sleep(seconds)
    cpu1, polls1 = time.process_time(), done[0]
    polls = polls1 - polls0
    return polls, 1000 * (cpu1 - cpu0) / max(1, polls)


def daemon(runs: int, seconds: float) -> tuple[int, float]:
    """The daemon's dispatch (scheduler.py), its poll a hand-off of a no-op read."""
    from prometheus_client import CollectorRegistry

    from gatekeeper.daemon.config import PollSettings
    from gatekeeper.daemon.exporter import DaemonMetrics
    from gatekeeper.daemon.scheduler import PollScheduler

    settings = PollSettings(interval=INTERVAL, jitter=0, workers=4, discovery_interval=3600)
    metrics = DaemonMetrics(CollectorRegistry(), list)
    sched = PollScheduler(settings, [], None, metrics, lambda *a: None, {})  # type: ignore[arg-type]
    done = [0]
    lock = threading.Lock()

    def poll(key: str) -> None:
        sched.pool.submit(lambda: None).result(timeout=30)
        with lock:
            done[0] += 1

    sched.poll = poll  # type: ignore[method-assign]
    sched.start()
    now = time.time()
    for i in range(runs):
        sched.due.add(f"r{i}", now + random.uniform(0, 5), INTERVAL)
    try:
        return window(done, seconds)
    finally:
        sched.stop()


def apscheduler(runs: int, seconds: float) -> tuple[int, float]:
    """One APScheduler interval job a run (the daemon's dispatch before DueQueue)."""
    pool = PollPool(max_workers=16, thread_name_prefix="poll")
    done = [0]
    lock = threading.Lock()
    scheduled: dict[str, datetime] = {}

    def submitted(event: JobSubmissionEvent) -> None:
        if event.scheduled_run_times:
            scheduled[event.job_id] = event.scheduled_run_times[-1]

    def poll(key: str) -> None:
        scheduled.pop(key, None)
        pool.submit(lambda: None).result(timeout=30)
        with lock:
            done[0] += 1

    sched = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(4)},
        job_defaults={"max_instances": 1, "coalesce": True},
        timezone="UTC",
    )
    sched.add_listener(submitted, EVENT_JOB_SUBMITTED)
    sched.start()
    now = datetime.now().astimezone()
    for i in range(runs):
        first = now + timedelta(seconds=random.uniform(0, 5))
        sched.add_job(poll, "interval", args=[f"r{i}"], id=f"r{i}", seconds=INTERVAL,
                      next_run_time=first, misfire_grace_time=int(INTERVAL))  # fmt: skip
    try:
        return window(done, seconds)
    finally:
        sched.shutdown(wait=False)
        pool.shutdown(wait=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="1000,3000,10000")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--dispatchers", default="apscheduler,daemon")
    args = ap.parse_args()
    print(f"each run polled every {INTERVAL:g}s; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    kinds = args.dispatchers.split(",")
    for runs in (int(x) for x in args.runs.split(",")):
        for what in kinds:
            if what == "daemon":
                polls, ms = daemon(runs, args.seconds)
                what = "daemon: queue + hand-off"
            else:
                polls, ms = apscheduler(runs, args.seconds)
                what = "apscheduler job + hand-off"
            print(f"  {runs:6d} runs, {what:26s}: {polls / args.seconds:7.1f} polls/s, "
                  f"{ms:.3f} ms CPU per poll | load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
