"""Benchmark: one steady daemon poll's CPU in several checkouts, paired round by round.

On a shared machine the same poll measures ~2.1 or ~3.5 ms depending on the second it
runs in, so whole `bench_poll_parts.py` runs taken one after another cannot resolve a
few per cent. Here one worker process per checkout holds its `bench_fleet_state`'s run (1,000
steps x 10 metrics, the shipped policies, the daemon's `RunWatcher` on SQLite, warmed by
20 polls); the coordinator asks each worker in turn for `--per` polls (10 new steps
each, appended untimed; fetch + apply timed by the process' CPU), alternating the order
every round, so every checkout samples the same phases of the machine. Reported per
checkout: the median CPU per poll over all its polls and, against the first checkout,
the median of the rounds' paired differences (and in how many rounds it was lower).
Name the first checkout twice to see the noise floor.

Usage: python bench/bench_poll_pairs.py [--rounds 30] [--per 40] NAME=CHECKOUT ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def worker() -> None:
    """Each stdin line N: N polls; prints their CPU times (s) as a JSON list. The run and
    policies are the checkout's own `bench_fleet_state` (which puts its checkout first on
    sys.path: this file's would judge with this checkout's gatekeeper)."""
    sys.path.insert(0, os.path.join(os.environ["PYTHONPATH"], "bench"))
    import bench_fleet_state

    import gatekeeper

    assert gatekeeper.__file__.startswith(os.environ["PYTHONPATH"]), gatekeeper.__file__

    tmp = tempfile.mkdtemp(prefix="gk-bench-poll-pairs-")
    try:
        watch = bench_fleet_state.Watch(tmp, 1000)
        for _ in range(20):
            watch.poll()
        print("ready", flush=True)
        for line in sys.stdin:
            costs = []
            for _ in range(int(line)):
                first = watch.steps + 10 * watch.polls
                with open(watch.path, "a") as fh:
                    fh.write(bench_fleet_state.rows(first, first + 10))
                watch.polls += 1
                c0 = time.process_time()
                watch.watcher.apply(watch.watcher.fetch(), float(watch.polls))
                costs.append(time.process_time() - c0)
            print(json.dumps(costs), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per", type=int, default=40, help="polls per checkout per round")
    ap.add_argument("trees", nargs="+", help="NAME=CHECKOUT, the first is the baseline")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=os.path.abspath(tree)),
        )
        for name, tree in trees.items()
    }
    for name, p in procs.items():
        assert p.stdin and p.stdout and p.stdout.readline().strip() == "ready", name
    names, load0 = list(trees), os.getloadavg()[0]
    costs: dict[str, list[float]] = {n: [] for n in names}
    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            p = procs[name]
            p.stdin.write(f"{args.per}\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            got = json.loads(p.stdout.readline())  # type: ignore[union-attr]
            costs[name] += got
            rounds[name].append(statistics.median(got))
    for p in procs.values():
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    print(f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}; {args.rounds} rounds x {args.per} polls")
    base = rounds[names[0]]
    for name in names:
        saved = [b - x for b, x in zip(base, rounds[name], strict=True)]
        print(
            f"{name:10} CPU per poll median {1e3 * statistics.median(costs[name]):.3f} ms "
            f"(rounds {1e3 * min(rounds[name]):.2f}-{1e3 * max(rounds[name]):.2f}); "
            f"saved vs {names[0]}: median {1e3 * statistics.median(saved):+.3f} ms, "
            f"lower in {sum(s > 0 for s in saved)}/{len(saved)} rounds"
        )


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--worker"] else main()
