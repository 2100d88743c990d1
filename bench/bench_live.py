"""Benchmark: live gating — detection latency and the cost of one poll vs history size.

1. Detection latency: `gatekeeper run` (the real CLI, default poll interval 1 s) wraps
   tests/live/writer.py, which logs a row every 50 ms and turns bad at a random step.
   Latency = the moment gatekeeper sent SIGTERM (verdict.stopped) minus the moment the
   writer had flushed the bad row (its stamp file). The bad row lands at a random phase
   of the poll cycle, so the median is about interval/2 plus the cost of a poll.
2. Poll cost vs history: one `LiveGate` each over a JSONL run already holding 10,000 and
   1,000,000 rows (x 4 metrics, 12 rules of 10 check kinds). After the catch-up read,
   each measured poll appends 10 rows and polls (read, feed, verdict); the two runs are
   polled interleaved, and the median per-poll time of each is compared.

3. Local wandb latency (`--wandb`): `gatekeeper run` wraps tests/wandb/trainers.py (the
   real wandb SDK, offline, HF Trainer's metric layout) turning bad at step 2, at several
   logging rates. wandb-core writes the `.wandb` file in 32 KiB blocks or on its flush
   timer, so the bad point reaches the file late: reported are the seconds from the
   trainer logging step 2 to SIGTERM, and the step the trainer had reached by then.

Targets (issue #4): median latency <= interval + 0.5 s; poll(1M) <= 1.2x poll(10k).
Usage: python bench/bench_live.py [--trials N] [--polls P] [--big ROWS] [--small ROWS]
       python bench/bench_live.py --wandb [--rates 500,20,2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WRITER = os.path.join(REPO, "tests", "live", "writer.py")
sys.path.insert(0, REPO)

KL_POLICY = """version: 1
name: bench
rules:
  - {id: kl-zero, metric: train/ppo_kl, check: {abs_max: 1.0e-8}}
"""

POLL_POLICY = """version: 1
name: bench
rules:
  - {id: kl-zero, metric: train/ppo_kl, check: {abs_max: 1.0e-3}}
  - {id: kl-first, metric: train/ppo_kl, steps: first, check: {abs_max: 1.0e-3}}
  - {id: loss-max, metric: train/loss, check: {max: 10}, for: 3}
  - {id: loss-between, metric: train/loss, check: {between: [0, 10]}}
  - {id: loss-spike, metric: train/loss, check: {spike: {window: 20, factor: 50}}}
  - {id: loss-trend, metric: train/loss, check: {trend: {window: 50, max_slope: 1.0}}}
  - {id: loss-mean-early, metric: train/loss, steps: {from: 0, to: 100}, reduce: mean,
     check: {max: 10}}
  - {id: loss-last, metric: train/loss, steps: last, check: {max: 10}}
  - {id: grad-flat, metric: train/grad_norm, check: {flat: {window: 50, min_std: 1.0e-9}}}
  - {id: grad-fraction, metric: train/grad_norm, check: {fraction: {above: 0.999, max: 0.5}}}
  - {id: reward-reach, metric: train/reward,
     check: {reach: {value: 0.5, by_step: 2000000000, window: 5}}}
  - {id: loss-fresh, metric: train/loss, check: {stale: {max_seconds: 3600}}}
"""


def _row(step: int, rng: random.Random) -> bytes:
    return (
        orjson.dumps(
            {
                "train/step": step,
                "train/ppo_kl": rng.uniform(0, 1e-4),
                "train/loss": 1.0 + rng.uniform(-0.01, 0.01),
                "train/grad_norm": rng.uniform(0.1, 0.3),
                "train/reward": rng.uniform(0, 1),
            }
        )
        + b"\n"
    )


# ---- 1. detection latency ----------------------------------------------------------------
def latency_trial(work: str, trial: int, interval: float | None) -> float:
    record = os.path.join(work, f"lat{trial}.jsonl")
    stamp = os.path.join(work, f"lat{trial}.stamp")
    verdict = os.path.join(work, f"lat{trial}.json")
    policy = os.path.join(work, "kl.yaml")
    bad = random.Random(trial).randint(25, 45)
    poll = ["--interval", str(interval)] if interval is not None else []
    cmd = [
        sys.executable, "-m", "gatekeeper", "run", "-p", policy, "--source", record,
        "--json", verdict, "--grace", "5", "-q", *poll, "--",
        sys.executable, WRITER, record, "--steps", "2000", "--delay", "0.05",
        "--bad-at", str(bad), "--stamp", stamp,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    if proc.returncode != 1:
        raise SystemExit(
            f"trial {trial}: expected exit 1, got {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
    stopped = json.load(open(verdict))["stopped"]
    flushed = {int(s): float(t) for s, t in (line.split() for line in open(stamp))}
    assert stopped["step"] == bad, stopped
    return float(stopped["signal_unix_times"]["SIGTERM"]) - flushed[bad]


def bench_latency(trials: int) -> tuple[float, list[float]]:
    from gatekeeper.live.loop import DEFAULT_INTERVAL

    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "kl.yaml"), "w") as fh:
            fh.write(KL_POLICY)
        samples = [latency_trial(work, t, None) for t in range(trials)]
    return DEFAULT_INTERVAL, samples


# ---- 2. poll cost vs history -------------------------------------------------------------
def make_run(work: str, rows: int) -> str:
    path = os.path.join(work, f"run-{rows}.jsonl")
    steps = np.arange(rows)
    rng = np.random.default_rng(rows)
    cols = {
        "train/ppo_kl": rng.uniform(0, 1e-4, rows),
        "train/loss": 1.0 + rng.uniform(-0.01, 0.01, rows),
        "train/grad_norm": rng.uniform(0.1, 0.3, rows),
        "train/reward": rng.uniform(0, 1, rows),
    }
    lists = {k: v.tolist() for k, v in cols.items()}
    with open(path, "wb") as fh:
        for i in range(0, rows, 100_000):
            chunk = [
                orjson.dumps({"train/step": s, **{k: v[s] for k, v in lists.items()}}) + b"\n"
                for s in steps[i : i + 100_000].tolist()
            ]
            fh.write(b"".join(chunk))
    return path


class Follow:
    """One run followed by a LiveGate, the way `watch` polls it."""

    def __init__(self, path: str, rows: int, policy: str):
        from gatekeeper.gate import load
        from gatekeeper.live.gate import LiveGate
        from gatekeeper.sources import open_live_source

        self.path, self.next_step = path, rows
        self.rng = random.Random(rows)
        self.gate = LiveGate(open_live_source(path), load([policy], []), started=time.time())
        t0 = time.perf_counter()
        tick = self.gate.poll(time.time())  # catch-up: reads the whole history once
        self.catch_up = time.perf_counter() - t0
        assert tick.points == rows * 4, tick.points
        self.times: list[float] = []

    def step(self, new_rows: int) -> None:
        with open(self.path, "ab") as fh:
            fh.write(b"".join(_row(self.next_step + i, self.rng) for i in range(new_rows)))
        self.next_step += new_rows
        t0 = time.perf_counter()
        tick = self.gate.poll(time.time())
        self.times.append(time.perf_counter() - t0)
        assert tick.points == new_rows * 4 and not tick.verdict.failing(), tick.verdict.failing()


def bench_polls(small: int, big: int, polls: int) -> dict[str, Follow]:
    with tempfile.TemporaryDirectory() as work:
        policy = os.path.join(work, "policy.yaml")
        with open(policy, "w") as fh:
            fh.write(POLL_POLICY)
        runs = {
            "small": Follow(make_run(work, small), small, policy),
            "big": Follow(make_run(work, big), big, policy),
        }
        for _ in range(polls):  # interleaved: both see the same machine load
            for follow in runs.values():
                follow.step(10)
    return runs


TRAINERS = os.path.join(REPO, "tests", "wandb", "trainers.py")
WANDB_POLICY = """version: 1
name: bench
rules:
  - {id: loss, metric: train/loss, check: {max: 10}}
"""


def wandb_latency(rate: float) -> tuple[float, int, int]:
    """(seconds from the trainer logging bad step 2 to SIGTERM, the trainer's step then,
    the last step gatekeeper had read) for a trainer logging `rate` steps per second."""
    with tempfile.TemporaryDirectory() as work:
        policy = os.path.join(work, "policy.yaml")
        with open(policy, "w") as fh:
            fh.write(WANDB_POLICY)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        env.update(WANDB_MODE="offline", WANDB_DIR=work, WANDB_SILENT="true",
                   WANDB_CONFIG_DIR=os.path.join(work, ".config"))
        out = os.path.join(work, "v.json")
        proc = subprocess.run(
            [sys.executable, "-m", "gatekeeper", "run", "-p", policy, "--source", work,
             "--grace", "20", "-q", "--json", out, "--", sys.executable, TRAINERS, "hf",
             "1000000", "--bad-at", "2", "--sleep", str(1.0 / rate)],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
        )
        stamps = {int(p[1]): float(p[2]) for p in
                  (ln.split() for ln in proc.stdout.splitlines() if ln.startswith("STEP "))}
        stopped = json.loads(open(out).read())["stopped"]
        sigterm = stopped["signal_unix_times"]["SIGTERM"]
        at_stop = max(step for step, t in stamps.items() if t <= sigterm)
        return sigterm - stamps[2], at_stop, int(stopped["last_step"])


def main_wandb(rates: list[float]) -> None:
    print("local wandb (offline) detection latency, bad step 2, default interval 1 s:")
    for rate in rates:
        secs, at_stop, read = wandb_latency(rate)
        print(f"  {rate:g} steps/s: SIGTERM {secs:.1f} s after step 2 was logged; trainer at "
              f"step {at_stop}, gatekeeper had read up to step {read}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--polls", type=int, default=300)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--wandb", action="store_true", help="only the local-wandb latency")
    ap.add_argument("--rates", default="500,20,2", help="steps per second, for --wandb")
    args = ap.parse_args()
    if args.wandb:
        main_wandb([float(r) for r in args.rates.split(",")])
        return

    interval, lat = bench_latency(args.trials)
    med = statistics.median(lat)
    print(
        "detection latency, bad row flushed -> SIGTERM sent, "
        f"interval {interval:g} s, {len(lat)} trials:"
    )
    print(
        f"  median {med:.3f} s  min {min(lat):.3f}  max {max(lat):.3f}  "
        f"(target <= {interval + 0.5:g} s)"
    )

    runs = bench_polls(args.small, args.big, args.polls)
    small, big = (statistics.median(runs[k].times) for k in ("small", "big"))
    print(
        f"poll cost (10 new rows x 4 metrics, 12 rules), median of {args.polls} interleaved polls:"
    )
    for key, label in (("small", args.small), ("big", args.big)):
        f = runs[key]
        print(
            f"  {label:>9,} rows of history: {statistics.median(f.times) * 1e3:7.3f} ms/poll"
            f"  (catch-up read {f.catch_up:.2f} s)"
        )
    ratio = big / small
    print(f"  ratio {ratio:.2f}x  (target <= 1.2x)")
    ok = med <= interval + 0.5 and ratio <= 1.2
    print("PASS" if ok else "MISS")


if __name__ == "__main__":
    main()
