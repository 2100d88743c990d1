"""Benchmark two checkouts of gatekeeper against each other: check, live, daemon.

Each checkout (default /work/wt/old and /work/wt/new) is measured through its own
`.venv` and its own public surface, so module moves between the two do not matter:
  check   `gatekeeper.gate.check(path, gate.load([policy], []))` in a fresh child (the
          bench_check.py measurement: seconds and peak memory above baseline), and the
          wall time of the whole `gatekeeper check -p POLICY RUN -q` CLI process, on
          bench_check.py's 50-rule policy and both JSONL forms (record, per-step rows)
  live    detection latency through `gatekeeper run` wrapping tests/live/writer.py, and the
          median cost of one LiveGate poll over a small and a big history (both through each
          checkout's own bench/bench_live.py: latency_trial and Follow)
  daemon  `gatekeeper serve` watching N JSONL runs that a writer thread appends to once a
          second (bench_daemon.py's setup): CPU share, peak RSS, ingest lag, poll lag and
          poll duration from /metrics. Both daemons get the same policies (by default the
          old checkout's shipped policies/miles + policies/rl-health.yaml, which the new one
          also loads), so the policy set added since does not count as a regression.

All inputs (run files, policies) are generated once and shared by both sides. The sides
run interleaved (old, new, old, new, ...) so machine load hits both alike; times are best
of the rounds (noise only adds), latency is the median of all trials, and every sample
line and table row carries os.getloadavg().

Usage (any python with numpy, orjson and httpx, e.g. the new checkout's venv):
  /work/wt/new/.venv/bin/python bench/bench_versions.py [--old DIR] [--new DIR]
      [--only check,live,daemon] [--rounds 3] [--check-steps 100000] [--check-metrics 50]
      [--lat-trials 12] [--poll-small 10000] [--poll-big 1000000] [--polls 100]
      [--daemon-runs 200] [--daemon-seconds 40] [--daemon-interval 10] [--daemon-rounds 2]
      [--json FILE]
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

HERE = os.path.dirname(os.path.abspath(__file__))

try:  # the data generators need numpy/orjson; the daemon driver needs httpx
    import httpx  # noqa: F401
    import numpy  # noqa: F401
    import orjson  # noqa: F401
except ImportError:  # pragma: no cover - re-run under the new checkout's venv
    for cand in (
        "/work/wt/new/.venv/bin/python",
        os.path.join(HERE, "..", ".venv", "bin", "python"),
    ):
        if os.path.exists(cand) and os.path.realpath(cand) != os.path.realpath(sys.executable):
            os.execv(cand, [cand, *sys.argv])
    raise

sys.path.insert(0, HERE)
import bench_check  # noqa: E402  (the generators; identical in both checkouts)
import bench_daemon  # noqa: E402
import bench_live  # noqa: E402


def load() -> float:
    return os.getloadavg()[0]


class Side:
    def __init__(self, name: str, root: str):
        self.name, self.root = name, os.path.abspath(root)
        self.python = os.path.join(self.root, ".venv", "bin", "python")
        self.cli = os.path.join(self.root, ".venv", "bin", "gatekeeper")
        for p in (self.python, self.cli):
            if not os.path.exists(p):
                raise SystemExit(f"{p} missing: run scripts/bootstrap.sh in {self.root}")
        self.commit = (
            subprocess.run(
                ["git", "-C", self.root, "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            or "?"
        )

    def child(self, code: str, *args: str, timeout: float = 900) -> str:
        proc = subprocess.run(
            [self.python, "-c", code, *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"[{self.name}] child failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        return proc.stdout


class Results:
    """Samples per (bench, metric, side), each with the 1-min load when it was taken."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []  # bench, metric, unit, agg
        self.samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}

    def add(self, bench: str, metric: str, unit: str, agg: str, side: str, value: float) -> None:
        if (bench, metric, unit, agg) not in self.rows:
            self.rows.append((bench, metric, unit, agg))
        ld = load()
        self.samples.setdefault((bench, metric, side), []).append((value, ld))
        print(
            f"    {side:3} {bench:6} {metric:34} {value:10.4g} {unit:5} load {ld:5.2f}", flush=True
        )

    def agg(self, bench: str, metric: str, agg: str, side: str) -> tuple[float, list[float]]:
        s = self.samples.get((bench, metric, side), [])
        if not s:
            return float("nan"), []
        vals = [v for v, _ in s]
        value = {"min": min, "max": max, "median": statistics.median}[agg](vals)
        return value, [ld for _, ld in s]

    def table(self) -> str:
        lines = [
            "| bench | metric | old | new | new/old | load (1-min, min-max) |",
            "| --- | --- | ---: | ---: | ---: | --- |",
        ]
        for bench, metric, unit, agg in self.rows:
            o, lo = self.agg(bench, metric, agg, "old")
            n, ln = self.agg(bench, metric, agg, "new")
            ratio = n / o if o else float("nan")
            lds = lo + ln
            lines.append(
                f"| {bench} | {metric} ({agg} of {len(lo)}/{len(ln)}) | {o:.4g} {unit} | "
                f"{n:.4g} {unit} | {ratio:.2f} | {min(lds):.1f}-{max(lds):.1f} |"
            )
        return "\n".join(lines)

    def to_json(self) -> dict:
        out = []
        for bench, metric, unit, agg in self.rows:
            o, lo = self.agg(bench, metric, agg, "old")
            n, ln = self.agg(bench, metric, agg, "new")
            out.append(
                {
                    "bench": bench,
                    "metric": metric,
                    "unit": unit,
                    "agg": agg,
                    "old": o,
                    "new": n,
                    "ratio": n / o if o else None,
                    "samples": {
                        s: self.samples.get((bench, metric, s), []) for s in ("old", "new")
                    },
                }
            )
        return {"rows": out}


# ---- check -------------------------------------------------------------------------------
CHECK_CHILD = r"""
import sys, time
import orjson
import numpy, pydantic, yaml  # the baseline includes the libraries check loads
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
from gatekeeper import gate
path, policy = sys.argv[1:3]
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
verdict = gate.check(path, gate.load([policy], []))
elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
assert len(verdict.results) == 50, len(verdict.results)
print(elapsed, cpu, hwm() - base)
"""


def run_cli(side: Side, argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user+sys, from wait4) and exit code of side's CLI."""
    w0 = time.perf_counter()
    proc = subprocess.Popen([side.cli, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - w0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, proc.returncode


def bench_check_pair(sides: list[Side], res: Results, args: argparse.Namespace, work: str) -> None:
    t0 = time.perf_counter()
    bench_check.OUT = os.path.join(work, "check")
    record, rows, policy = bench_check.generate(args.check_steps, args.check_metrics)
    print(
        f"  check data {args.check_steps}x{args.check_metrics} ready in "
        f"{time.perf_counter() - t0:.1f}s (record {os.path.getsize(record) / 1e6:.0f} MB, "
        f"rows {os.path.getsize(rows) / 1e6:.0f} MB)",
        flush=True,
    )
    rcs: dict[tuple[str, str], set[int]] = {}
    for rnd in range(args.rounds):
        print(f"  check round {rnd + 1}/{args.rounds}", flush=True)
        for label, path in (("record", record), ("rows", rows)):
            for side in sides:
                secs, cpu, mem = (float(x) for x in side.child(CHECK_CHILD, path, policy).split())
                res.add("check", f"{label}: gate.check wall", "s", "min", side.name, secs)
                res.add("check", f"{label}: gate.check CPU", "s", "min", side.name, cpu)
                res.add(
                    "check", f"{label}: gate.check peak mem", "MB", "median", side.name, mem / 1e6
                )
                wall, cpu, rc = run_cli(
                    side, ["check", "-p", policy, path, "-q", "--github", "never"]
                )
                if rc not in (0, 1):
                    raise SystemExit(f"[{side.name}] gatekeeper check exit {rc}")
                rcs.setdefault((label, side.name), set()).add(rc)
                res.add("check", f"{label}: CLI check wall", "s", "min", side.name, wall)
                res.add("check", f"{label}: CLI check CPU", "s", "min", side.name, cpu)
    for label in ("record", "rows"):
        if rcs[(label, "old")] != rcs[(label, "new")]:
            print(
                f"  WARNING: {label}: exit codes differ old {rcs[(label, 'old')]} "
                f"new {rcs[(label, 'new')]}"
            )


# ---- live --------------------------------------------------------------------------------
LAT_CHILD = r"""
import os, sys, json
sys.path.insert(0, "bench")
import bench_live
work, policy = sys.argv[1:3]
trials = [int(t) for t in sys.argv[3].split(",")]
print(json.dumps([bench_live.latency_trial(work, t, None) for t in trials]))
"""

POLL_CHILD = r"""
import sys, json, statistics, time
sys.path.insert(0, "bench")
import bench_live
small, big, policy, polls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
n_small, n_big = int(sys.argv[5]), int(sys.argv[6])
runs = {"small": bench_live.Follow(small, n_small, policy),
        "big": bench_live.Follow(big, n_big, policy)}
cpu = {k: [] for k in runs}
def step(f, key, new_rows=10):  # bench_live.Follow.step, timing CPU as well as wall
    with open(f.path, "ab") as fh:
        fh.write(b"".join(bench_live._row(f.next_step + i, f.rng) for i in range(new_rows)))
    f.next_step += new_rows
    t0, c0 = time.perf_counter(), time.process_time()
    tick = f.gate.poll(time.time())
    cpu[key].append(time.process_time() - c0)
    f.times.append(time.perf_counter() - t0)
    assert tick.points == new_rows * 4 and not tick.verdict.failing(), tick.verdict.failing()
for _ in range(polls):
    for key, f in runs.items():
        step(f, key)
print(json.dumps({k: [f.catch_up, statistics.median(f.times), statistics.median(cpu[k])]
                  for k, f in runs.items()}))
"""


def bench_live_pair(sides: list[Side], res: Results, args: argparse.Namespace, work: str) -> None:
    lw = os.path.join(work, "live")
    os.makedirs(lw, exist_ok=True)
    with open(os.path.join(lw, "kl.yaml"), "w") as fh:
        fh.write(bench_live.KL_POLICY)
    poll_policy = os.path.join(lw, "policy.yaml")
    with open(poll_policy, "w") as fh:
        fh.write(bench_live.POLL_POLICY)
    t0 = time.perf_counter()
    small = bench_live.make_run(lw, args.poll_small)
    big = bench_live.make_run(lw, args.poll_big)
    print(
        f"  live runs {args.poll_small:,} and {args.poll_big:,} rows ready in "
        f"{time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    per_round = [list(range(args.lat_trials))[r :: args.rounds] for r in range(args.rounds)]
    for rnd in range(args.rounds):
        print(f"  live round {rnd + 1}/{args.rounds}", flush=True)
        for side in sides:
            if per_round[rnd]:
                sw = os.path.join(lw, f"lat-{side.name}-{rnd}")
                os.makedirs(sw, exist_ok=True)
                shutil.copy(os.path.join(lw, "kl.yaml"), sw)
                trials = ",".join(map(str, per_round[rnd]))
                for v in json.loads(side.child(LAT_CHILD, sw, "kl.yaml", trials)):
                    res.add(
                        "live", "detection latency (gatekeeper run)", "s", "median", side.name, v
                    )
        for side in sides:
            s_copy, b_copy = (
                os.path.join(lw, f"{side.name}-{os.path.basename(p)}") for p in (small, big)
            )
            shutil.copy(small, s_copy)
            shutil.copy(big, b_copy)
            out = json.loads(
                side.child(
                    POLL_CHILD,
                    s_copy,
                    b_copy,
                    poll_policy,
                    str(args.polls),
                    str(args.poll_small),
                    str(args.poll_big),
                )
            )
            for key, n in (("small", args.poll_small), ("big", args.poll_big)):
                res.add(
                    "live",
                    f"poll wall, {n:,} rows history",
                    "ms",
                    "min",
                    side.name,
                    out[key][1] * 1e3,
                )
                res.add(
                    "live",
                    f"poll CPU, {n:,} rows history",
                    "ms",
                    "min",
                    side.name,
                    out[key][2] * 1e3,
                )
            res.add(
                "live",
                f"catch-up read, {args.poll_big:,} rows",
                "s",
                "min",
                side.name,
                out["big"][0],
            )
            os.unlink(s_copy)
            os.unlink(b_copy)


# ---- daemon ------------------------------------------------------------------------------
def daemon_once(
    side: Side, policies: list[str], args: argparse.Namespace, work: str
) -> dict[str, float]:
    """bench_daemon.py's run, against `side`'s CLI with the given policies; returns figures."""
    import httpx

    tmp = tempfile.mkdtemp(prefix=f"daemon-{side.name}-", dir=work)
    paths, port, cfg = bench_daemon.setup(tmp, args.daemon_runs, args.daemon_interval, 4, policies)
    for p in paths:
        open(p, "w").close()
    writer = bench_daemon.Writer(paths)
    writer.start()
    log = open(os.path.join(tmp, "daemon.log"), "wb")
    daemon = subprocess.Popen(
        [side.cli, "serve", "-c", cfg, "--log-level", "warning"],
        cwd=side.root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    nmet = len(bench_daemon.METRICS)
    try:
        t_start = time.monotonic()
        bench_daemon.wait_ready(base, daemon, f"[{side.name}] daemon exited: see {tmp}/daemon.log")
        ready = time.monotonic() - t_start
        time.sleep(2 * args.daemon_interval + 5)
        pid = daemon.pid
        cpu0, t0 = bench_daemon.cpu_seconds(pid), time.monotonic()
        rss_peak, lag_max, lags = 0.0, 0.0, []
        while time.monotonic() - t0 < args.daemon_seconds:
            time.sleep(5)
            rss_peak = max(rss_peak, bench_daemon.rss_mb(pid))
            written = writer.steps
            rs = httpx.get(f"{base}/api/runs", timeout=30).json()["runs"]
            behind = sorted(written - r["points"] / nmet for r in rs)
            lags.append(behind[int(0.95 * (len(behind) - 1))])
            lag_max = max(lag_max, behind[-1])
        cpu = (bench_daemon.cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        text = httpx.get(f"{base}/metrics", timeout=30).text
        if len(rs) != args.daemon_runs:
            print(
                f"  WARNING [{side.name}]: daemon lists {len(rs)} runs, expected {args.daemon_runs}"
            )
        return {
            "ready": ready,
            "cpu": cpu,
            "rss": rss_peak,
            "lag_p95": lags[-1],
            "lag_max": lag_max,
            "poll_lag_p95": bench_daemon.histogram_p(text, "gatekeeper_poll_lag_seconds", 0.95),
            "poll_dur_p95": bench_daemon.histogram_p(
                text, "gatekeeper_poll_duration_seconds", 0.95
            ),
        }
    finally:
        writer.stop.set()
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        writer.join(5)
        shutil.rmtree(tmp, ignore_errors=True)


def bench_daemon_pair(sides: list[Side], res: Results, args: argparse.Namespace, work: str) -> None:
    pol = os.path.join(work, "daemon-policies")
    if not os.path.isdir(pol):
        src = os.path.join(args.daemon_policies_from or sides[0].root, "policies")
        shutil.copytree(os.path.join(src, "miles"), os.path.join(pol, "miles"))
        shutil.copy(os.path.join(src, "rl-health.yaml"), pol)
    policies = [os.path.join(pol, "miles"), os.path.join(pol, "rl-health.yaml")]
    print(
        f"  daemon: {args.daemon_runs} runs x {len(bench_daemon.METRICS)} metrics at 1 step/s, "
        f"poll every {args.daemon_interval:g}s, 4 workers, "
        f"warm-up {2 * args.daemon_interval + 5:g}s, measuring {args.daemon_seconds:g}s; "
        f"policies {sorted(os.listdir(os.path.join(pol, 'miles')))}"
        f" + rl-health.yaml",
        flush=True,
    )
    for rnd in range(args.daemon_rounds):
        print(f"  daemon round {rnd + 1}/{args.daemon_rounds}", flush=True)
        for side in sides:
            d = daemon_once(side, policies, args, work)
            res.add("daemon", "CPU share (1.0 = one core)", "core", "min", side.name, d["cpu"])
            res.add("daemon", "peak RSS", "MB", "min", side.name, d["rss"])
            res.add("daemon", "ingest lag p95", "steps", "min", side.name, d["lag_p95"])
            res.add("daemon", "ingest lag max", "steps", "min", side.name, d["lag_max"])
            res.add(
                "daemon", "poll start lag p95 (bucket)", "s", "min", side.name, d["poll_lag_p95"]
            )
            res.add(
                "daemon", "poll duration p95 (bucket)", "s", "min", side.name, d["poll_dur_p95"]
            )
            res.add("daemon", "start to /readyz", "s", "min", side.name, d["ready"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="/work/wt/old")
    ap.add_argument("--new", default="/work/wt/new")
    ap.add_argument("--only", default="check,live,daemon")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds for check and live")
    ap.add_argument("--check-steps", type=int, default=100_000)
    ap.add_argument("--check-metrics", type=int, default=50)
    ap.add_argument("--lat-trials", type=int, default=12, help="latency trials per side")
    ap.add_argument("--poll-small", type=int, default=10_000)
    ap.add_argument("--poll-big", type=int, default=1_000_000)
    ap.add_argument("--polls", type=int, default=100)
    ap.add_argument("--daemon-runs", type=int, default=200)
    ap.add_argument("--daemon-seconds", type=float, default=40)
    ap.add_argument("--daemon-interval", type=float, default=10)
    ap.add_argument("--daemon-rounds", type=int, default=2)
    ap.add_argument(
        "--daemon-policies-from",
        default=None,
        help="checkout whose policies/ both daemons use (default: --old)",
    )
    ap.add_argument("--work", default=None, help="keep generated inputs here (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write all samples as JSON")
    args = ap.parse_args()
    sides = [Side("old", args.old), Side("new", args.new)]
    only = set(args.only.split(","))
    work = args.work or tempfile.mkdtemp(prefix="gk-benchcmp-")
    os.makedirs(work, exist_ok=True)
    print(
        f"old {sides[0].root} ({sides[0].commit})  new {sides[1].root} ({sides[1].commit})  "
        f"cpus {os.cpu_count()}  load {os.getloadavg()}  work {work}",
        flush=True,
    )
    res = Results()
    t0 = time.monotonic()
    try:
        for name, fn in (
            ("check", bench_check_pair),
            ("live", bench_live_pair),
            ("daemon", bench_daemon_pair),
        ):
            if name in only:
                t = time.monotonic()
                fn(sides, res, args, work)
                print(f"  [{name} done in {time.monotonic() - t:.0f}s]", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        print()
        print(
            f"old = {sides[0].commit}, new = {sides[1].commit}; "
            f"{time.monotonic() - t0:.0f}s total; "
            f"load now {os.getloadavg()}"
        )
        print(res.table())
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(res.to_json(), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
