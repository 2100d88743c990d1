"""Cost of the daemon's state store per poll commit, on SQLite or PostgreSQL.

python bench/bench_state_store.py [--state URL] [--runs 200] [--rounds 5] [--lease]

Each commit writes what a poll with new data writes: the run row with its judging state
(an `Evaluation` of policies/rl-health.yaml, as the daemon saves it), one rule row and
one alert state. `--lease` takes every run's lease first (a replica on PostgreSQL), so
each commit also renews it. Prints wall and CPU milliseconds per commit and the time to
read every run back. The URL defaults to a temporary SQLite file; for PostgreSQL give an
empty database (its gkd_* tables are created, rows are left behind).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from gatekeeper.daemon.payload import dumps
from gatekeeper.daemon.state import AlertState, PollCommit, RuleRow
from gatekeeper.daemon.stores import open_state
from gatekeeper.engine import Evaluation
from gatekeeper.policy.loader import load_policies

REPO = Path(__file__).resolve().parents[1]


def commits(runs: int) -> list[PollCommit]:
    evaluation = Evaluation(load_policies([str(REPO / "policies" / "rl-health.yaml")]))
    return [
        PollCommit(
            key=f"/runs/{i}", target="bench", cursor={"offset": 1000 * i}, evaluation=evaluation,
            fingerprint="fp", verdict={"status": "pass", "run": {"name": f"r{i}"}},
            status="pass", points=1000, ended=False, now=time.time(),
            rules=[RuleRow("p", "r", "fail", "pass", 1.0, None, 0, "")],
            alert_states={("p", "r", "hook"): AlertState(False, 0.0)}, alerts=[],
        )
        for i in range(runs)
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--state", default=os.path.join(tempfile.mkdtemp(), "state.db"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lease", action="store_true")
    args = ap.parse_args()
    store = open_state(args.state)
    batch = commits(args.runs)
    if args.lease:
        leases = store.lease_as("bench", 600)
        if leases is None:
            ap.error("--lease needs a PostgreSQL state")
        leases.offer("bench", [c.key for c in batch])
        leases.cycle()  # the only replica: its share is every run
    for c in batch:
        store.commit_poll(c)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.rounds):
        for c in batch:
            store.commit_poll(c)
    n = args.runs * args.rounds
    wall_ms = (time.perf_counter() - wall) / n * 1e3
    cpu_ms = (time.process_time() - cpu) / n * 1e3
    read = time.perf_counter()
    found = len(store.load_runs())
    read_ms = (time.perf_counter() - read) * 1e3
    store.close()
    print(
        f"{store.path}: {n} commits, state row {len(dumps(batch[0].evaluation))} B: "
        f"{wall_ms:.2f} ms wall, {cpu_ms:.2f} ms CPU per commit; "
        f"reading {found} runs back {read_ms:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
