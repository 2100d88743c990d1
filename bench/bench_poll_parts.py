"""Benchmark: where one steady daemon poll's CPU goes, part by part.

The run and policies of bench_fleet_state.py (1,000 steps x 10 train/* metrics, 10 new
steps a poll, the shipped policies/miles + policies/rl-health.yaml) watched by the
daemon's own `RunWatcher` on a real SQLite state store. Each part is a function of the
poll path wrapped by a timer of this thread's CPU (`time.thread_time`); a part's time
excludes the wrapped parts it calls (so the rows add up to the total). Parts a version of
gatekeeper lacks are left out, so the same script measures two checkouts: run it with
PYTHONPATH at each, interleaved, to compare them on a noisy machine.

Usage: PYTHONPATH=<checkout> python bench/bench_poll_parts.py [--polls 300] [--steps 1000]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (row, module, attribute path): the functions timed; the first that exist of a row count
PARTS = [
    ("source read (fetch, JSONL)", "gatekeeper.daemon.watch", "RunWatcher.fetch"),
    ("evaluation: feed", "gatekeeper.session", "JudgingSession.feed"),
    ("evaluation: verdict", "gatekeeper.session", "JudgingSession.verdict"),
    ("verdict to_dict", "gatekeeper.verdict", "Verdict.to_dict"),
    ("verdict kept results (compare, compose)", "gatekeeper.daemon.payload", "VerdictText.encode"),
    ("json.dumps (verdict, cursor)", "json", "dumps"),
    ("state encode (to_state + orjson)", "gatekeeper.daemon.payload", "dumps"),
    ("rule rows written", "gatekeeper.daemon.state", "SqlState._write_effects"),
    ("rest of commit (run row, transaction)", "gatekeeper.daemon.state", "SqlState.commit_poll"),
    ("debounce", "gatekeeper.daemon.watch", "track"),
    ("alert decisions", "gatekeeper.daemon.watch", "RunWatcher._decide"),
    ("rest of apply", "gatekeeper.daemon.watch", "RunWatcher.apply"),
]


class Timer:
    """Exclusive thread CPU per part, counted only while `on`."""

    def __init__(self) -> None:
        self.on, self.spent = False, {row: 0.0 for row, _, _ in PARTS}
        self.stack: list[float] = []  # per open wrapped call: CPU its wrapped callees took

    def wrap(self, row: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kw: Any) -> Any:
            if not self.on:
                return fn(*args, **kw)
            self.stack.append(0.0)
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                took = time.thread_time() - t0
                inner = self.stack.pop()
                self.spent[row] += took - inner
                if self.stack:
                    self.stack[-1] += took

        return timed

    def install(self) -> list[str]:
        """Wrap every part this gatekeeper has; the rows it lacks."""
        missing = []
        for row, module, path in PARTS:
            owner: Any = importlib.import_module(module)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part, None)
            if owner is None or not hasattr(owner, name):
                missing.append(row)
                continue
            setattr(owner, name, self.wrap(row, getattr(owner, name)))
        return missing


def timed_poll(watch: Any, timer: Timer) -> float:
    """`bench_fleet_state.Watch.poll` with the writing untimed: 10 steps appended, then
    fetch + apply timed (this process's CPU) and its parts counted."""
    from bench_fleet_state import rows

    first = watch.steps + 10 * watch.polls
    with open(watch.path, "a") as fh:
        fh.write(rows(first, first + 10))
    watch.polls += 1
    timer.on, c0 = True, time.process_time()
    watch.watcher.apply(watch.watcher.fetch(), float(watch.polls))
    cost, timer.on = time.process_time() - c0, False
    return cost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=300)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    timer = Timer()
    missing = timer.install()
    import bench_fleet_state

    import gatekeeper

    tmp = tempfile.mkdtemp(prefix="gk-bench-poll-parts-")
    try:
        watch = bench_fleet_state.Watch(tmp, args.steps)
        for _ in range(20):  # warm: caches, the store's pages
            watch.poll()
        costs, load0 = [], os.getloadavg()[0]
        for _ in range(args.polls):
            costs.append(timed_poll(watch, timer))
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.polls
    parts = {row: 1000 * s / n for row, s in timer.spent.items() if row not in missing}
    out = {
        "gatekeeper": os.path.dirname(os.path.dirname(gatekeeper.__file__)),
        "load": [load0, load1],
        "parts_ms": parts,
        "sum_ms": sum(parts.values()),
        "poll_cpu_ms_median": 1000 * statistics.median(costs),
        "poll_cpu_ms_mean": 1000 * statistics.mean(costs),
    }
    print(f"{out['gatekeeper']}  (load {load0:.1f} -> {load1:.1f}, {n} polls)")
    for row, ms in parts.items():
        print(f"  {row:<42} {ms:6.3f} ms")
    print(f"  {'sum of parts (thread CPU, mean)':<42} {out['sum_ms']:6.3f} ms")
    print(
        f"  {'CPU per poll (process, median / mean)':<42} "
        f"{out['poll_cpu_ms_median']:6.3f} / {out['poll_cpu_ms_mean']:.3f} ms"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
