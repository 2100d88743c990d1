"""Check: a change to the poll path stores the same bytes. Run with each checkout on
PYTHONPATH, then compare the two output files (`cmp`): one line per poll with the hash of
everything the store holds after it.

A varied run polled 80 times, twice (debounce 1 and 2): the shipped policies plus a
pattern rule, a `for` streak, a tight spike, a reduced rule and a `metric: config.KEY`
rule the run's config does not name; 0-13 new steps a poll with NaN, +Inf, x1e6 spikes
and an int among the floats, eval metrics on their own axis appearing late; two alert
channels (one repeating). After every poll: the run rows (cursor, state, verdict, status,
counts), rule rows, alert states and the outbox's alerts, the temporary directory and the
file's inode and device replaced (they differ between the two runs).

Usage: PYTHONPATH=<checkout> python bench/poll_identity.py OUT  (prints the gatekeeper used)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile

from gatekeeper.daemon.service import fingerprint
from gatekeeper.daemon.state import StateStore
from gatekeeper.daemon.watch import ChannelRule, RunWatcher, Watched
from gatekeeper.policy.loader import load_policies
from gatekeeper.sources import open_live_source

# bench_fleet_state's metrics; the policies of this file's checkout for both runs (not
# imported from bench_fleet_state: it puts this checkout first on sys.path)
METRICS = [
    *("train/ppo_kl", "train/pg_clipfrac", "train/kl_loss", "train/loss", "train/grad_norm"),
    *("train/train_rollout_logprob_abs_diff", "train/entropy", "train/lr", "train/reward"),
    "train/response_len",
]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = [
    os.path.join(REPO, "policies", "miles"),
    os.path.join(REPO, "policies", "rl-health.yaml"),
]

EXTRA = """version: 1
name: extra
rules:
  - {id: pattern, metric: "eval/*/x", check: {abs_max: 2}}
  - {id: streak, metric: train/loss, for: 2, check: {max: 0.5}}
  - {id: spiky, metric: train/reward, check: {spike: {window: 5, factor: 3}}}
  - {id: mean, metric: train/lr, reduce: mean, check: {max: 0.7}}
  - {id: named, metric: config.key, check: {finite: true}}
"""
TABLES = {
    "runs": "key, cursor, state, verdict, status, points, polls, ended, updated",
    "rules": "*",
    "alert_state": "*",
    "alerts": "id, channel, payload, created, outcome",
}


def row(rng: random.Random, step: int) -> str:
    out: dict[str, float | int] = {"train/step": step}
    for m in METRICS:
        v, r = 1e-3 * (1 + rng.random()), rng.random()
        # NaN, +Inf, a x1e6 spike, an int among the floats, or the value
        out[m] = next(
            x
            for p, x in ((0.01, math.nan), (0.015, math.inf), (0.03, v * 1e6), (0.04, 1), (1, v))
            if r < p
        )
    if step % 3 == 0:
        out.update({"eval/a/x": rng.random() * 3, "eval/step": step})
    if step > 300 and step % 5 == 0:
        out.update({"eval/b/x": rng.random(), "eval/step": step})
    return json.dumps(out) + "\n"


def dump(db_path: str, tmp: str) -> str:
    with sqlite3.connect(db_path) as db:
        rows = [
            repr(r).replace(tmp, "TMP")
            for table, cols in TABLES.items()
            for r in db.execute(f"SELECT {cols} FROM {table} ORDER BY 1, 2, 3")
        ]
    return re.sub(r'"(ino|dev)": [0-9]+', r'"\1": X', "\n".join(rows))


def main() -> None:
    import gatekeeper

    print(gatekeeper.__file__)
    tmp, rng = tempfile.mkdtemp(prefix="gk-poll-identity-"), random.Random(7)
    try:
        extra = os.path.join(tmp, "extra.yaml")
        with open(extra, "w") as fh:
            fh.write(EXTRA)
        policies = load_policies([*POLICIES, extra])
        channels = [
            ChannelRule("a", frozenset({"fail", "error"}), 0.0),
            ChannelRule("b", frozenset({"fail", "warn", "error", "pass"}), 30.0),
        ]
        with open(sys.argv[1], "w") as out:
            for debounce in (1, 2):
                path, db = (
                    os.path.join(tmp, f"run{debounce}.jsonl"),
                    os.path.join(tmp, f"s{debounce}.db"),
                )
                open(path, "w").close()
                watched = Watched(
                    "t",
                    policies,
                    fingerprint(policies),
                    (),
                    10,
                    debounce,
                    channels,
                    open_live_source,
                )
                watcher, step = RunWatcher(path, watched, StateStore(db)), 0
                for poll in range(80):
                    new = rng.choice([0, 1, 5, 10, 10, 13])
                    with open(path, "a") as fh:
                        fh.write("".join(row(rng, s) for s in range(step, step + new)))
                    step += new
                    watcher.apply(watcher.fetch(), float(poll * 10))
                    text = dump(db, tmp)
                    digest = hashlib.sha256(text.encode()).hexdigest()
                    out.write(f"{debounce} {poll} {digest} {len(text)}\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
