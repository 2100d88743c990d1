"""Benchmark: a watched run's saved judging state and a poll's CPU, by the run's length.

One run per length (1k, 10k, 100k steps) x 10 train/* metrics, written as a JSONL file
the way a trainer appends it, watched by the daemon's own `RunWatcher` on a real SQLite
`StateStore` with the shipped policies (policies/miles + policies/rl-health.yaml, the
same set bench_daemon.py serves). The first poll reads the whole run; then each steady
poll appends 10 steps and is polled, judged and committed. Per length it reports:
  state    bytes of the run's saved judging state (the `runs.state` row)
  per rule the rules whose saved state is largest (where the bytes go)
  poll     CPU seconds per steady poll (fetch + judge + commit), median of --polls,
           the lengths' polls interleaved
Then /metrics at --runs runs (the shipped policies' 45 rules in 10 policies, 10 metrics
each, statuses as the shipped policies give a healthy run): bytes and seconds to render,
by default and with every opt-in (metrics.rules, metrics.values).
Targets (issue 28): state and poll cost at 1k, 10k and 100k steps within 1.2x;
/metrics under 1 MB and 0.1 s at 1,000 runs.
Usage: python bench/bench_fleet_state.py [--lengths 1000,10000,100000] [--polls 30]
       [--runs 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from prometheus_client import CollectorRegistry  # noqa: E402

from gatekeeper.daemon.exporter import (  # noqa: E402
    DaemonMetrics,
    MetricsSettings,
    MetricView,
    RunView,
)
from gatekeeper.daemon.service import fingerprint  # noqa: E402
from gatekeeper.daemon.state import RuleRow, SqlState, StateStore  # noqa: E402
from gatekeeper.daemon.watch import RunWatcher, Watched  # noqa: E402
from gatekeeper.policy.loader import load_policies  # noqa: E402
from gatekeeper.sources import open_live_source  # noqa: E402

METRICS = [
    "train/ppo_kl",
    "train/pg_clipfrac",
    "train/kl_loss",
    "train/loss",
    "train/grad_norm",
    "train/train_rollout_logprob_abs_diff",
    "train/entropy",
    "train/lr",
    "train/reward",
    "train/response_len",
]
POLICIES = [
    os.path.join(REPO, "policies", "miles"),
    os.path.join(REPO, "policies", "rl-health.yaml"),
]


def rows(start: int, stop: int) -> str:
    """Per-step JSONL rows, values varying a little (not one repeated number)."""
    out = []
    for step in range(start, stop):
        v = 1e-3 * (1 + (step * 7919 % 97) / 97)
        out.append(json.dumps({"train/step": step, **{m: v for m in METRICS}}))
    return "\n".join(out) + "\n"


def cpu() -> float:
    return time.process_time()  # this process's CPU, every thread, to the nanosecond


class Watch:
    """One run of `steps` steps, watched: the first poll has read it whole."""

    def __init__(
        self,
        tmp: str,
        steps: int,
        store: SqlState | None = None,
        policy_paths: list[str] = POLICIES,
    ):
        """`store`: the state store (default: a SQLite file under tmp)."""
        self.steps, self.polls, self.costs = steps, 0, []
        self.path = os.path.join(tmp, f"run-{steps}.jsonl")
        with open(self.path, "w") as fh:
            for lo in range(0, steps, 10_000):
                fh.write(rows(lo, min(steps, lo + 10_000)))
        policies = load_policies(policy_paths)
        self.store = store or StateStore(os.path.join(tmp, f"state-{steps}.db"))
        watched = Watched(
            target="bench",
            policies=policies,
            fingerprint=fingerprint(policies),
            tags=(),
            interval=10,
            debounce=1,
            channels=[],
            open_source=open_live_source,
        )
        self.watcher = RunWatcher(self.path, watched, self.store)
        self.watcher.apply(self.watcher.fetch(), 0.0)  # the whole run so far

    def poll(self) -> None:
        """Append 10 steps, then poll, judge and commit them (timed)."""
        first = self.steps + 10 * self.polls
        with open(self.path, "a") as fh:
            fh.write(rows(first, first + 10))
        self.polls += 1
        c0 = cpu()
        self.watcher.apply(self.watcher.fetch(), float(self.polls))
        self.costs.append(cpu() - c0)

    def figures(self) -> dict[str, object]:
        with self.store._read() as cur:
            cur.execute(self.store._sql("SELECT state FROM {t}runs"))
            (state,) = cur.fetchone()
        self.store.close()
        rules = json.loads(state)["evaluation"]["rules"]
        sizes = sorted(((len(json.dumps(r["tracker"])), r["key"]) for r in rules), reverse=True)
        return {
            "steps": self.steps,
            "rules": len(rules),
            "state_bytes": len(state),
            "poll_cpu_ms": 1000 * statistics.median(self.costs),
            "largest": [(str(k), n) for n, k in sizes[:5]],
        }


def measure(
    tmp: str, lengths: list[int], polls: int, policy_paths: list[str] = POLICIES
) -> list[dict[str, object]]:
    """Per length, its figures; the polls interleaved (one of each length in turn), so a
    change of the machine's load falls on every length alike."""
    watches = [Watch(tmp, n, policy_paths=policy_paths) for n in lengths]
    for _ in range(polls):
        for w in watches:
            w.poll()
    return [w.figures() for w in watches]


def exposition(
    n_runs: int, rules: tuple[RuleRow, ...], settings: MetricsSettings
) -> tuple[int, float]:
    """(bytes, seconds) of one /metrics body at `n_runs` runs, made as the daemon makes it
    (its views of the runs, the event metrics, the state text; best of 5)."""
    metrics = tuple(MetricView(m, 100_000, 0.001) for m in METRICS)

    def views() -> list[RunView]:  # as Daemon._views builds them on every scrape
        return [
            RunView(f"run-{i:04d}", "pass", 1.7e9, tuple(rules), metrics=metrics)
            for i in range(n_runs)
        ]

    daemon_metrics = DaemonMetrics(CollectorRegistry(), views, settings)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        text, _ = daemon_metrics.exposition()
        best = min(best, time.perf_counter() - t0)
    return len(text), best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1000,10000,100000")
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gk-bench-fleet-state-")
    results = []
    try:
        for r in measure(tmp, [int(x) for x in args.lengths.split(",")], args.polls):
            results.append(r)
            n = r["steps"]
            print(
                f"{n:>7} steps: state {r['state_bytes']:>10,} B  poll {r['poll_cpu_ms']:7.2f} ms "
                f"CPU ({r['rules']} rules); largest: "
                + ", ".join(f"{k} {b:,} B" for k, b in r["largest"][:3])  # type: ignore[index]
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    states = [float(r["state_bytes"]) for r in results]  # type: ignore[arg-type]
    costs = [float(r["poll_cpu_ms"]) for r in results]  # type: ignore[arg-type]
    print(
        f"state max/min {max(states) / min(states):.2f}x, poll CPU max/min "
        f"{max(costs) / min(costs):.2f}x (target <= 1.2x each)"
    )
    rules = tuple(
        RuleRow(p.name, r.id, r.severity.value, "pass", 0.0)
        for p in load_policies(POLICIES)
        for r in p.rules
    )
    for label, settings in (
        ("default", MetricsSettings()),
        ("rules+values", MetricsSettings(rules=True, values=True)),
    ):
        size, secs = exposition(args.runs, rules, settings)
        print(f"/metrics at {args.runs} runs, {label}: {size:,} B in {secs * 1000:.0f} ms")
        results.append({"metrics": label, "runs": args.runs, "bytes": size, "seconds": secs})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
