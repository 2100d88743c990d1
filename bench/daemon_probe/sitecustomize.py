"""Where a `gatekeeper serve` child's CPU goes, for bench_fleet.py (issue 28).

Put this folder on PYTHONPATH with GK_PROBE=PREFIX set: every `gatekeeper serve` that
Python starts then writes PREFIX.PID.txt at the end of a window (GK_PROBE_WINDOW="START,
SECONDS" after its start; default 25,35, bench_fleet's warm-up and measuring time at
--seconds 40): the process CPU (user, system), the thread CPU spent in
`RunWatcher.fetch`, `RunWatcher.apply` and APScheduler's `_process_jobs`, per apply, and
the cyclic collector's passes per generation with their wall time (the collector holds
the GIL) and what they collected. Other processes (the bench itself) are left alone.

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


def _begin() -> None:
    global _on, _t0
    from apscheduler.schedulers.base import BaseScheduler

    from gatekeeper.daemon.watch import RunWatcher

    for owner, name in ((RunWatcher, "fetch"), (RunWatcher, "apply")):
        _timed(owner, name)
    _timed(BaseScheduler, "_process_jobs")
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
    lines += [
        f"  collector gen{g}: {p} passes, {s:.3f} s, collected {c}" for g, (p, s, c) in _gc.items()
    ]
    with open(f"{_OUT}.{os.getpid()}.txt", "w") as fh:
        fh.write("\n".join(lines) + "\n")


if _OUT and _serving():
    gc.callbacks.append(_collector)
    for at, what in ((START, _begin), (START + SECONDS, _end)):
        timer = threading.Timer(at, what)
        timer.daemon = True
        timer.start()
    atexit.register(_end)
