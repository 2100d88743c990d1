"""Benchmark: `gatekeeper check` of one run under an anomaly policy against the same run
under a threshold policy, end to end.

Writes (cached under bench/out/) a 100,000-step x 50-metric run as JSONL rows (what a
trainer writes: uniform noise; a few of its 100,000 windows are steep or spiky enough to
fail a trend or spike rule, a verdict like any other) and three 50-rule policies, one rule
per metric, every 10th on a derived `expr` metric (a ratio of two):
  threshold           max, min, abs_max, between in turn
  anomaly             spike, trend, flat, fraction, history in turn (the budget's policy)
  anomaly-no-history  spike, trend, flat, fraction in turn: the anomaly checks alone
and a SQLite history store holding B trusted earlier runs (the run's values +-1%, recorded
by `gatekeeper check --record` with the history rules alone), so that the history rules
are active and read their baselines from it as a user's gate does.

Then, in fresh child processes, interleaved (threshold, anomaly, ..., threshold, ...) so
that machine noise hits all alike, R rounds of
    gatekeeper check RUN -p POLICY --history DB --name bench -q
with the same flags for each: start-up, reading, the baselines read, judging, the verdict.
Each policy's verdict is checked first (every rule judged, none an ERROR or skipped: the
history rules are active), so the figure is of the work a user's gate does. Reported per
policy: median and best of R, wall time and the child's CPU time (the steadier on a
shared machine), each median over threshold's, with the machine's load.

Budget (issue 25): anomaly <= 1.2x threshold (median wall). Exit 0 when it holds.
Usage: python bench/bench_anomaly.py [--steps N] [--metrics M] [--repeat R] [--baseline-runs B]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
BUDGET = 1.2

ANOMALY = [
    "{spike: {window: 20, factor: 8}}",
    "{trend: {window: 50, max_slope: 0.01}}",
    "{flat: {window: 50, min_std: 1.0e-4}}",
    "{fraction: {above: 0.999, max: 0.5}}",
    "{history: {rel_up: 0.5, rel_down: 0.5}}",
]
THRESHOLD = ["{max: 1.5}", "{min: -0.5}", "{abs_max: 2.0}", "{between: [-1, 2]}"]
# threshold first: the others' ratios are over it; "anomaly" is the budget's
POLICIES = {"threshold": THRESHOLD, "anomaly": ANOMALY, "anomaly-no-history": ANOMALY[:4]}


def names(metrics: int) -> list[str]:
    return [f"train/m{i:02d}" for i in range(metrics)]


def write_policy(path: str, kinds: list[str], metrics: int, only: str | None = None) -> None:
    """One rule per metric, cycling through `kinds` (only those of kind `only`, if given);
    every 10th rule reads a derived metric (a ratio of two) instead."""
    ms = names(metrics)
    lines = []
    for i, name in enumerate(ms):
        kind = kinds[i % len(kinds)]
        if only is not None and not kind.startswith("{" + only):
            continue
        what = f'expr: "{name} / ({ms[(i + 1) % metrics]} + 1)"' if i % 10 == 9 else ""
        lines.append(f"  - {{id: r{i:02d}, {what or f'metric: {name}'}, check: {kind}}}\n")
    with open(path, "w") as fh:
        fh.write("version: 1\nname: bench\nrules:\n" + "".join(lines))


def write_rows(path: str, steps: int, metrics: int, scale: np.ndarray | None = None) -> None:
    """JSONL rows, one per step: {"train/step": s, "train/m00": v, ...}."""
    data = np.random.default_rng(0).uniform(0.0, 1.0, (metrics, steps))
    if scale is not None:
        data *= scale
    cols = data.round(6).T.tolist()
    ms = names(metrics)
    with open(path + ".tmp", "w") as fh:
        for s in range(steps):
            row = {"train/step": s}
            row.update(zip(ms, cols[s], strict=True))
            fh.write(json.dumps(row) + "\n")
    os.replace(path + ".tmp", path)


def check(run: str, policy: str, db: str, *extra: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `gatekeeper check` child (its exit status checked)."""
    cmd = [sys.executable, "-m", "gatekeeper", "check", run, "-p", policy, "--history", db,
           "--name", "bench", "-q", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: a rule failed, a verdict like any other
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def prepare(args: argparse.Namespace) -> dict[str, str]:
    """The run, the policies and a history store with B trusted runs (cached)."""
    os.makedirs(OUT, exist_ok=True)
    tag = f"{args.steps}x{args.metrics}"
    paths = {k: os.path.join(OUT, f"anomaly-{k}-{tag}{e}") for k, e in (
        ("run", ".jsonl"), ("past", ".yaml"), ("db", f"-b{args.baseline_runs}.sqlite"),
        ("report", ".json"), *((name, ".yaml") for name in POLICIES))}
    if not os.path.exists(paths["run"]):
        write_rows(paths["run"], args.steps, args.metrics)
    for name, kinds in POLICIES.items():
        write_policy(paths[name], kinds, args.metrics)
    write_policy(paths["past"], ANOMALY, args.metrics, only="history")  # the same coordinates
    if not os.path.exists(paths["db"]):
        past = os.path.join(OUT, f"anomaly-past-{tag}.jsonl")
        rng = np.random.default_rng(1)
        db = paths["db"] + ".tmp"
        for b in range(args.baseline_runs):
            scale = rng.uniform(0.99, 1.01, (args.metrics, args.steps))
            write_rows(past, args.steps, args.metrics, scale)
            # the first has no history to be judged by: nothing judged is its verdict (exit 5)
            check(past, paths["past"], db, "--record", "--run-id", f"past{b}",
                  "--allow-nothing-judged", "seeding the bench's history store")
        os.remove(past)
        os.replace(db, paths["db"])
    return paths


def verify(paths: dict[str, str], kind: str, metrics: int) -> str:
    """Every rule judged every point: each passes or fails, none is an ERROR or skipped
    (the history rules are active, reading their baselines). Untimed: --json."""
    check(paths["run"], paths[kind], paths["db"], "--json", paths["report"])
    with open(paths["report"]) as fh:
        results = json.load(fh)["results"]
    statuses = {f"{r['rule']} {r['check']['kind']}": r["status"] for r in results}
    assert len(results) == metrics and set(statuses.values()) <= {"pass", "fail"}, statuses
    fails = sum(s == "fail" for s in statuses.values())
    return f"{kind} {metrics - fails} pass, {fails} fail"


def summary(name: str, runs: list[tuple[float, float]], base: list[tuple[float, float]]) -> str:
    parts = []
    for label, pick in (("wall", 0), ("CPU", 1)):
        t, x = [r[pick] for r in base], [r[pick] for r in runs]
        parts.append(f"{label} median {statistics.median(x):6.3f}s best {min(x):6.3f}s "
                     f"({statistics.median(x) / statistics.median(t):4.2f}x)")
    return f"  {name:19s} " + " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline-runs", type=int, default=5)
    args = ap.parse_args()
    paths = prepare(args)
    # the tree the children run: `-m` and `-c` put their working directory (this one) first
    code = "import gatekeeper, os; print(os.path.dirname(gatekeeper.__file__))"
    where = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip()
    print(f"{args.steps} steps x {args.metrics} metrics as JSONL rows; history store of "
          f"{args.baseline_runs} trusted runs; gatekeeper from {where}; "
          f"{args.repeat} interleaved rounds")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in POLICIES}
    print("verdicts: " + "; ".join(verify(paths, kind, args.metrics) for kind in times))
    for _ in range(args.repeat):
        for kind in times:
            times[kind].append(check(paths["run"], paths[kind], paths["db"]))
    print("`check` end to end, child wall and CPU time (x: the median over threshold's):")
    for kind, runs in times.items():
        print(summary(kind, runs, times["threshold"]))
    print("machine load (1/5/15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ratio = statistics.median(x[0] for x in times["anomaly"]) / statistics.median(
        x[0] for x in times["threshold"])
    print(f"anomaly / threshold, `check` end to end: {ratio:.2f}x (budget <= {BUDGET}x)")
    return 0 if ratio <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
