"""Benchmark: `gatekeeper serve` watching 1,000 live runs, each appending 10 metrics a second.

A writer thread appends one per-step row (10 train/* metrics) to every run's JSONL file
once a second; the daemon (a child process, polling every --interval seconds with the
shipped miles + rl-health policies) watches them all. After a warm-up it samples:
  cpu      the daemon's CPU time / wall time (1.0 = one full core)
  rss      the daemon's resident memory
  lag      steps written but not yet ingested, per run (max and p95): bounded = keeps up
  poll lag how late polls start against their schedule (p95 from the histogram)

The daemon is started as `python -m gatekeeper serve -c FILE` (the real live JSONL source).
Targets (issue #6): lag stays bounded, cpu < 0.5 of one core, rss < 500 MB.
Usage: python bench/bench_daemon.py [--runs 1000] [--seconds 120] [--interval 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Writer(threading.Thread):
    """Appends one row to every run each second; `steps` is how many rows each run has."""

    def __init__(self, paths: list[str]):
        super().__init__(daemon=True)
        self.paths = paths
        self.steps = 0
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            row = {"train/step": self.steps, **{m: 0.001 for m in METRICS}}
            line = json.dumps(row) + "\n"
            for path in self.paths:
                with open(path, "a") as fh:
                    fh.write(line)
            self.steps += 1
            self.stop.wait(max(0.0, start + self.steps - time.monotonic()))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def histogram_p(text: str, name: str, q: float) -> float:
    buckets = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1] if buckets else 0
    for le, count in buckets:
        if total and count >= q * total:
            return le
    return float("nan")


def setup(
    tmp: str,
    n_runs: int,
    interval: float,
    workers: int,
    policies: list[str],
    state: str | None = None,
) -> tuple[list[str], int, str]:
    """The daemon config watching `n_runs` JSONL files under tmp/runs: (run paths, HTTP
    port, config path). `state`: the store URL (default: tmp/state.db). Shared with
    bench_versions.py and bench_fleet.py."""
    runs = os.path.join(tmp, "runs")
    os.makedirs(runs)
    paths = [os.path.join(runs, f"run-{i:05d}.jsonl") for i in range(n_runs)]
    port, cfg_path = config(tmp, "gatekeeper", interval, workers, policies, state)
    return paths, port, cfg_path


def config(
    tmp: str,
    name: str,
    interval: float,
    workers: int,
    policies: list[str],
    state: str | None,
    poll: dict[str, object] | None = None,
) -> tuple[int, str]:
    """A config file tmp/NAME.yaml for one daemon watching tmp/runs/*.jsonl on a free
    port: (port, its path). Replicas on one shared store each have one. `poll`: more
    `poll:` settings (bench_fleet's `checkpoint`)."""
    port = free_port()
    cfg = {
        "state": state or os.path.join(tmp, "state.db"),
        "http": {"port": port},
        "poll": {
            "interval": interval,
            "jitter": 1,
            "timeout": 20,
            "discovery_interval": 10,
            "workers": workers,
            **(poll or {}),
        },
        "targets": [{"glob": os.path.join(tmp, "runs", "*.jsonl"), "policies": policies}],
    }
    cfg_path = os.path.join(tmp, f"{name}.yaml")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    return port, cfg_path


def spawn(
    cfg_path: str, log_path: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`gatekeeper serve -c CFG` as a child process, its output to `log_path`."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gatekeeper", "serve", "-c", cfg_path, "--log-level", "warning"],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def wait_ready(base: str, daemon: subprocess.Popen[bytes], died: str) -> None:
    """Until the daemon answers /readyz; SystemExit(`died`) if it exits first."""
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if daemon.poll() is not None:
            raise SystemExit(died)
        time.sleep(0.25)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gk-bench-daemon-")
    policies = [
        os.path.join(REPO, "policies", "miles"), os.path.join(REPO, "policies", "rl-health.yaml")
    ]
    paths, port, cfg_path = setup(tmp, args.runs, args.interval, args.workers, policies)
    writer = Writer(paths)
    for path in paths:  # the runs exist before the daemon starts (it also discovers later)
        open(path, "w").close()
    writer.start()
    daemon = spawn(cfg_path, os.path.join(tmp, "daemon.log"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, daemon, f"daemon exited: see {tmp}/daemon.log")
        warmup = 2 * args.interval + 5
        print(
            f"{args.runs} runs x {len(METRICS)} metrics at 1 step/s, poll every "
            f"{args.interval:g}s, {args.workers} workers; warm-up {warmup:g}s, "
            f"measuring {args.seconds:g}s"
        )
        time.sleep(warmup)
        measure(daemon.pid, base, writer, args)
    finally:
        writer.stop.set()
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def measure(pid: int, base: str, writer: Writer, args: argparse.Namespace) -> None:
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    rss_peak, lag_max, lags = 0.0, 0.0, []
    while time.monotonic() - t0 < args.seconds:
        time.sleep(5)
        rss_peak = max(rss_peak, rss_mb(pid))
        written = writer.steps
        runs = httpx.get(f"{base}/api/runs", timeout=30).json()["runs"]
        behind = sorted(written - r["points"] / len(METRICS) for r in runs)
        lags.append(behind[int(0.95 * (len(behind) - 1))])
        lag_max = max(lag_max, behind[-1])
        cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        print(
            f"  t={time.monotonic() - t0:5.0f}s cpu={cpu:.2f} core rss={rss_mb(pid):.0f} MB "
            f"lag p95={lags[-1]:.0f} max={behind[-1]:.0f} steps"
        )
    cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    text = httpx.get(f"{base}/metrics", timeout=30).text
    p95 = histogram_p(text, "gatekeeper_poll_lag_seconds", 0.95)
    dur = histogram_p(text, "gatekeeper_poll_duration_seconds", 0.95)
    trend = "bounded" if lags[-1] <= max(lags[: max(1, len(lags) // 2)]) + 1 else "GROWING"
    print(
        f"cpu {cpu:.2f} of one core (target < 0.50) | peak rss {rss_peak:.0f} MB (< 500) | "
        f"ingest lag p95 {lags[-1]:.0f} max {lag_max:.0f} steps, {trend} | poll start lag "
        f"p95 <= {p95:g}s | poll duration p95 <= {dur:g}s"
    )


if __name__ == "__main__":
    main()
