"""Benchmark: what the daemon's dispatch of one poll costs, without the poll.

`gatekeeper serve` schedules each run as its own APScheduler interval job (10 s, on a
4-thread executor, the `EVENT_JOB_SUBMITTED` listener that times the poll's lag), and each
job hands the source read to a second pool and waits on its future (a hung read must not
hold a worker: gatekeeper/daemon/scheduler.py). Here the jobs do exactly that around a
no-op read, so the process CPU per poll is the dispatch alone: what polling runs in
batches, one job per tick, could save (docs/daemon.md "Capacity").

Usage: python bench/bench_dispatch.py [--runs 1000,3000,10000] [--seconds 30]
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


def measure(runs: int, seconds: float, handoff: bool) -> tuple[int, float]:
    """(polls made, ms of process CPU per poll) over `seconds`, after one interval."""
    pool = PollPool(max_workers=16, thread_name_prefix="poll")
    done = [0]
    lock = threading.Lock()
    scheduled: dict[str, datetime] = {}

    def submitted(event: JobSubmissionEvent) -> None:
        if event.scheduled_run_times:
            scheduled[event.job_id] = event.scheduled_run_times[-1]

    def poll(key: str) -> None:
        scheduled.pop(key, None)
        if handoff:
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
    time.sleep(INTERVAL + 2)
    cpu0, polls0 = time.process_time(), done[0]
    time.sleep(seconds)
    cpu1, polls1 = time.process_time(), done[0]
    sched.shutdown(wait=False)
    pool.shutdown(wait=False)
    polls = polls1 - polls0
    return polls, 1000 * (cpu1 - cpu0) / max(1, polls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="1000,3000,10000")
    ap.add_argument("--seconds", type=float, default=30)
    args = ap.parse_args()
    print(f"one interval job a run, every {INTERVAL:g}s; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for runs in (int(x) for x in args.runs.split(",")):
        for handoff in (False, True):
            polls, ms = measure(runs, args.seconds, handoff)
            what = "job + read hand-off" if handoff else "job only"
            print(f"  {runs:6d} runs, {what:19s}: {polls / args.seconds:7.1f} polls/s, "
                  f"{ms:.3f} ms CPU per poll | load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
