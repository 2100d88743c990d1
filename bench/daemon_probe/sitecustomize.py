"""Where a `gatekeeper serve` child's CPU goes, for bench_fleet.py (issue 28).

Put this folder on PYTHONPATH with GK_PROBE=PREFIX set: every `gatekeeper serve` that
Python starts then writes PREFIX.PID.txt at the end of a window (GK_PROBE_WINDOW="START,
SECONDS" after its start; default 25,35, bench_fleet's warm-up and measuring time at
--seconds 40): the process CPU (user, system), the thread CPU spent in
`RunWatcher.fetch`, `RunWatcher.apply`, the dispatcher's `PollScheduler.tick`, the poll
(`PollScheduler.poll`), APScheduler's `_process_jobs`, its job wrapper (`run_job`) and
job events (discovery and the lease cycle only, since the queue), per apply, and
the cyclic collector's passes per generation with their wall time (the collector holds
the GIL) and what they collected. With GK_PROBE_PARTS=1 also bench_poll_parts.py's parts
of a poll, timed the same way (exclusive thread CPU), to set beside the in-process
figures. Other processes (the bench itself) are left alone.

  PYTHONPATH=$PWD:$PWD/bench/daemon_probe GK_PROBE=/tmp/probe \\
      python bench/bench_fleet.py --runs 1000 --seconds 40 --skip replicas,length
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import time
from typing import Any

_OUT = os.environ.get("GK_PROBE")
START, SECONDS = (float(x) for x in os.environ.get("GK_PROBE_WINDOW", "25,35").split(","))
_on = False
_cpu: dict[str, list[float]] = {}  # part: [thread CPU, calls]
_gc = {g: [0, 0.0, 0] for g in range(3)}  # generation: [passes, wall s, collected]
_began: list[float | None] = [None]
_t0 = (0.0, 0.0)  # user, system CPU at the window start


def _serving() -> bool:
    with open("/proc/self/cmdline", "rb") as fh:
        return b"\0serve\0" in fh.read()


def _collector(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _began[0] = time.perf_counter() if _on else None
    elif _began[0] is not None:  # a pass that began inside the window
        row = _gc[info["generation"]]
        row[0] += 1
        row[1] += time.perf_counter() - _began[0]
        row[2] += info["collected"]


def _timed(owner: Any, name: str) -> None:
    fn = getattr(owner, name)

    def timed(*args: Any, **kw: Any) -> Any:
        if not _on:
            return fn(*args, **kw)
        c0 = time.thread_time()
        try:
            return fn(*args, **kw)
        finally:
            if _on:
                row = _cpu.setdefault(name, [0.0, 0])
                row[0] += time.thread_time() - c0
                row[1] += 1

    setattr(owner, name, timed)


def _times() -> tuple[float, float]:
    with open("/proc/self/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _wrap() -> None:
    """Wrapped at start-up, before the scheduler binds its methods; timed in the window."""
    import apscheduler.executors.pool as aps_pool
    from apscheduler.executors.base import BaseExecutor
    from apscheduler.schedulers.base import BaseScheduler

    from gatekeeper.daemon.scheduler import PollScheduler
    from gatekeeper.daemon.watch import RunWatcher

    for owner, name in ((RunWatcher, "fetch"), (RunWatcher, "apply")):
        _timed(owner, name)
    _timed(BaseScheduler, "_process_jobs")
    # the dispatch of the due polls (tick), the poll itself (its thread CPU: metrics, the
    # hand-off to the pool and the wait; apply inside), and the control jobs: APScheduler's
    # wrapper of them, their success events, discovery
    _timed(aps_pool, "run_job")
    for name in ("tick", "poll", "discover"):
        _timed(PollScheduler, name)
    _timed(BaseExecutor, "_run_job_success")


_local = threading.local()  # per thread: the CPU the open wrapped parts' callees took


def _part(row: str, fn: Any) -> Any:
    """bench_poll_parts' exclusive timing of one part, per thread."""

    def timed(*args: Any, **kw: Any) -> Any:
        if not _on:
            return fn(*args, **kw)
        stack = _local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        t0 = time.thread_time()
        try:
            return fn(*args, **kw)
        finally:
            took = time.thread_time() - t0
            inner = stack.pop()
            _parts[row] = _parts.get(row, 0.0) + took - inner
            if stack:
                stack[-1] += took

    return timed


_parts: dict[str, float] = {}


def _wrap_parts() -> None:
    """The parts of bench_poll_parts.py (same functions, same exclusive timing)."""
    import importlib
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench_poll_parts import PARTS

    for row, module, path in PARTS:
        owner: Any = importlib.import_module(module)
        *outer, name = path.split(".")
        for step in outer:
            owner = getattr(owner, step, None)
        if owner is not None and hasattr(owner, name):
            setattr(owner, name, _part(row, getattr(owner, name)))


def _begin() -> None:
    global _on, _t0
    _t0 = _times()
    _on = True


def _end() -> None:
    global _on
    if not _on:
        return
    _on = False
    user, system = (b - a for a, b in zip(_t0, _times(), strict=True))
    n = max(1, int(_cpu.get("apply", [0, 0])[1]))
    lines = [
        f"window {SECONDS:g}s: user {user:.2f} s, system {system:.2f} s, {n} applies, "
        f"{1000 * (user + system) / n:.2f} ms per apply; threshold {gc.get_threshold()}"
    ]
    lines += [
        f"  {k}: {v[0]:.2f} s in {int(v[1])} calls, {1000 * v[0] / n:.3f} ms per apply"
        for k, v in _cpu.items()
    ]
    lines += [f"  part {k}: {1000 * v / n:.3f} ms per apply" for k, v in _parts.items()]
    lines += [
        f"  collector gen{g}: {p} passes, {s:.3f} s, collected {c}" for g, (p, s, c) in _gc.items()
    ]
    with open(f"{_OUT}.{os.getpid()}.txt", "w") as fh:
        fh.write("\n".join(lines) + "\n")


if _OUT and _serving():
    gc.callbacks.append(_collector)
    if os.environ.get("GK_PROBE_PARTS"):
        _wrap_parts()  # inside the timers of _wrap: the probe's own timers stay outermost
    _wrap()
    for at, what in ((START, _begin), (START + SECONDS, _end)):
        timer = threading.Timer(at, what)
        timer.daemon = True
        timer.start()
    atexit.register(_end)
