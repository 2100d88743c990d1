"""Benchmark: the history store, gatekeeper's first layout vs today's, beside miles' schema.

Builds the same trusted history three ways in SQLite files — 20 runs x 50 metrics x
10,000 steps (10M values) by default — and reports each file's size:
- `legacy`: gatekeeper's first layout (gatekeeper/history/legacy.py: one row per value,
  the coordinate JSON in the row, the primary key and an index);
- `miles`: miles' shipped schema (tests/ci/metric_history/storage/sqlite_store.py at
  radixark/miles 31f1ca961a94, one `metric_values` row per value);
- `gk`: today's layout (gk_series + one gk_points row of packed arrays per run x metric).

Then judges one more run of the same shape against the legacy and the gk store, side by
side: read the baselines of 50 `history` rules (steps: all) and evaluate. The legacy
read is the first version's code path (ROW_NUMBER window query, per-step Python lists).

Targets (issue 12): gk disk <= miles' disk; gk judge time <= legacy judge time / 3.
Usage: python bench/bench_history.py [--small] [--runs R --metrics M --steps N]
       [--skip-miles] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from itertools import chain

import numpy as np
from gatekeeper.history.session import coordinate_prefix, history_rules, read_baselines

from gatekeeper.engine import Evaluation
from gatekeeper.history import Baselines, RuleBaseline
from gatekeeper.history.base import CoordinateStats, RunRecord
from gatekeeper.history.legacy import BASELINE as LEGACY_BASELINE
from gatekeeper.history.legacy import SQLITE_DDL as LEGACY_DDL
from gatekeeper.history.sqlite import SqliteStore
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies

SERIES = '{"name":"bench"}'
MILES_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, test_path TEXT NOT NULL, backend TEXT NOT NULL,
    suite TEXT NOT NULL, commit_sha TEXT NOT NULL, pr_number INTEGER, github_run_id INTEGER,
    github_run_attempt INTEGER, event_name TEXT, ref TEXT, created_at TEXT NOT NULL,
    trusted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS metric_values (
    run_id TEXT NOT NULL REFERENCES runs(run_id), metric_key TEXT NOT NULL,
    steps_key TEXT NOT NULL, constraint_key TEXT NOT NULL, step INTEGER NOT NULL,
    value REAL NOT NULL);
CREATE INDEX IF NOT EXISTS runs_baseline_idx
    ON runs (test_path, backend, suite, trusted, created_at DESC);
"""


def names(metrics: int) -> list[str]:
    return [f"train/m{i:02d}" for i in range(metrics)]


def write_policy(path: str, metrics: int) -> None:
    with open(path, "w") as fh:
        fh.write("version: 1\nname: bench\nrules:\n")
        for i, name in enumerate(names(metrics)):
            fh.write(
                f"  - {{id: r{i:02d}, metric: {name}, steps: all, "
                "check: {history: {rel_up: 0.5, rel_down: 0.5}}}\n"
            )


def history_values(runs: int, metrics: int, steps: int, seed: int) -> Iterator[np.ndarray]:
    """Per run, a (metrics, steps) array: a fixed curve per metric +-1% per run."""
    base = np.random.default_rng(0).uniform(0.5, 1.5, (metrics, steps))
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        yield base * rng.uniform(0.99, 1.01, base.shape)


def old_keys(metrics: int) -> list[tuple[str, str, str]]:
    """The first layout's coordinate text for these rules (as its coordinate_prefix made)."""
    return [
        (m, '{"kind":"all"}', '{"history":{"rel_down":0.5,"rel_up":0.5}}') for m in names(metrics)
    ]


def build_legacy(path: str, args: argparse.Namespace) -> float:
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    for stmt in LEGACY_DDL:
        conn.execute(stmt)
    keys = old_keys(args.metrics)
    step_list = list(range(args.steps))
    for r, data in enumerate(history_values(args.runs, args.metrics, args.steps, 1), 1):
        with conn:
            conn.execute(
                "INSERT INTO runs (run_id, series, commit_sha, trusted, created_at) "
                "VALUES (?, ?, ?, 1, ?)",
                (f"run{r}", SERIES, f"c{r}", f"2026-01-01T00:00:{r:02d}+00:00"),
            )
            rows = (
                (r, *keys[i], s, v)
                for i in range(args.metrics)
                for s, v in zip(step_list, data[i].tolist(), strict=True)
            )
            conn.executemany("INSERT INTO metric_values VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.close()
    return time.perf_counter() - t0


def build_miles(path: str, args: argparse.Namespace) -> float:
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    conn.executescript(MILES_SCHEMA)
    constraint = '{"rel_down":0.5,"rel_up":0.5}'
    step_list = list(range(args.steps))
    for r, data in enumerate(history_values(args.runs, args.metrics, args.steps, 1), 1):
        run_id = uuid.uuid4().hex
        with conn:
            conn.execute(
                "INSERT INTO runs (run_id, test_path, backend, suite, commit_sha, created_at, "
                "trusted) VALUES (?, ?, ?, ?, ?, ?, 1)",
                (run_id, "tests/e2e/test_bench.py", "cuda", "stage-c", f"c{r}",
                 f"2026-01-01T00:00:{r:02d}.000000+00:00"),
            )
            rows = (
                (run_id, m, '"all"', constraint, s, v)
                for i, m in enumerate(names(args.metrics))
                for s, v in zip(step_list, data[i].tolist(), strict=True)
            )
            conn.executemany("INSERT INTO metric_values VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.close()
    return time.perf_counter() - t0


def build_gk(path: str, args: argparse.Namespace, policies) -> float:
    t0 = time.perf_counter()
    prefixes = [coordinate_prefix(r) for r in history_rules(policies)]
    steps = np.arange(args.steps, dtype=np.int64)
    with SqliteStore(path) as store:
        for r, data in enumerate(history_values(args.runs, args.metrics, args.steps, 1), 1):
            points = {p: (steps, data[i]) for i, p in enumerate(prefixes)}
            store.record(RunRecord(f"run{r}", SERIES, True, points, f"c{r}"))
    return time.perf_counter() - t0


def legacy_stats(values: dict[int, list[float]], last_n: int) -> CoordinateStats:
    """The first version's per-step statistics (np.add.reduceat over flattened lists)."""
    steps = np.array(sorted(values), dtype=np.int64)
    lists = [values[int(s)][:last_n] for s in steps]
    count = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    flat = np.fromiter(chain.from_iterable(lists), dtype=np.float64, count=int(count.sum()))
    starts = np.concatenate([[0], np.cumsum(count)[:-1]])
    ref = np.add.reduceat(flat, starts) / count
    dev = flat - np.repeat(ref, count)
    std = np.sqrt(np.add.reduceat(dev * dev, starts) / count)
    return CoordinateStats(steps, ref, std, count)


def legacy_read(path: str, policies, args: argparse.Namespace) -> Baselines:
    """The first version's read: one window query per rule, per-step Python lists."""
    conn = sqlite3.connect(path)
    rules = {}
    for rule, (metric, sk, ck) in zip(history_rules(policies), old_keys(args.metrics), strict=True):
        out: dict[int, list[float]] = {}
        q = LEGACY_BASELINE.format(p="?")
        for step, value in conn.execute(q, (SERIES, True, metric, sk, ck, 20)).fetchall():
            out.setdefault(int(step), []).append(float(value))
        baseline = RuleBaseline(positional=False, rows=[])
        baseline._stats[20] = legacy_stats(out, 20)
        rules[rule.key] = baseline
    conn.close()
    return Baselines(rules, path)


def judge(policies, run: Run, baselines: Baselines):
    ev = Evaluation(policies)
    ev.feed(run.series)
    return ev.verdict(run, final=True, history=baselines)


def size(path: str) -> int:
    return os.path.getsize(path) + sum(
        os.path.getsize(path + s) for s in ("-wal", "-journal") if os.path.exists(path + s)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--small", action="store_true", help="20 runs x 5 metrics x 1,000 steps")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--skip-miles", action="store_true", help="do not build miles' schema")
    ap.add_argument("--keep", metavar="DIR", help="build the stores here and keep them")
    args = ap.parse_args()
    if args.small:
        args.metrics, args.steps = 5, 1_000
    total = args.runs * args.metrics * args.steps
    print(f"{args.runs} runs x {args.metrics} metrics x {args.steps} steps = {total:,} values")
    tmp = args.keep or tempfile.mkdtemp(prefix="gk-bench-history-")
    os.makedirs(tmp, exist_ok=True)
    try:
        pol = os.path.join(tmp, "bench.yaml")
        write_policy(pol, args.metrics)
        policies = load_policies([pol])
        paths = {k: os.path.join(tmp, f"{k}.db") for k in ("legacy", "miles", "gk")}
        for p in paths.values():
            if os.path.exists(p):
                os.remove(p)
        built = {"legacy": build_legacy(paths["legacy"], args)}
        if not args.skip_miles:
            built["miles"] = build_miles(paths["miles"], args)
        built["gk"] = build_gk(paths["gk"], args, policies)
        for k, t in built.items():
            print(f"disk  {k:7} {size(paths[k]) / 1e6:10.1f} MB   (built in {t:6.1f}s)")

        (new_values,) = history_values(1, args.metrics, args.steps, 2)
        steps = np.arange(args.steps, dtype=np.int64)
        run = Run(
            name="bench",
            source="mem",
            series={
                m: Series(m, steps, new_values[i], "train/step")
                for i, m in enumerate(names(args.metrics))
            },
        )
        times = {}
        verdicts = {}
        for k in ("legacy", "gk"):
            t0 = time.perf_counter()
            if k == "legacy":
                base = legacy_read(paths[k], policies, args)
            else:
                with SqliteStore(paths[k]) as store:
                    base = read_baselines(store, policies, SERIES, run)
            t_read = time.perf_counter() - t0
            verdicts[k] = judge(policies, run, base)
            times[k] = (t_read, time.perf_counter() - t0)
            print(f"judge {k:7} {times[k][1]:8.3f}s  (baseline read {t_read:.3f}s)")
        for k, v in verdicts.items():
            counts = {s: n for s, n in v.counts().items() if n}
            assert counts == {"pass": args.metrics}, (k, counts)
        ratio = times["legacy"][1] / times["gk"][1]
        print(f"judge speed-up {ratio:.1f}x (target >= 3x)")
        ok = ratio >= 3
        if "miles" in built:
            ok = ok and size(paths["gk"]) <= size(paths["miles"])
            print(f"gk disk / miles disk {size(paths['gk']) / size(paths['miles']):.3f} (<= 1)")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
