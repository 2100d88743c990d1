"""Benchmark: the daemon as a fleet. Runs x 10 metrics x 1 step/s, the shipped policies
(policies/miles + rl-health, bench_daemon.py's set), polled every --interval seconds.

  scale     one `gatekeeper serve` (SQLite state) per --runs count
  replicas  1 .. --replicas daemons sharing --replica-runs runs on one PostgreSQL state
            (a throwaway cluster: tests/history/pgcluster.py, as the tests start it)
  length    one run's poll cost and saved state at --lengths steps (bench_fleet_state.py)

Per daemon: CPU (share of one core) and peak RSS; per phase: polls/s committed (the
store's `runs.polls`, summed) against the polls/s needed (runs / interval), CPU per
committed poll, and the ingest lag (steps written minus steps read, per run: p95 and
max at the end; "bounded" when the max at the end is no worse than in the first half: a
run the scheduler does not reach falls behind a step a second while the p95 may stay
flat). Steps read are the store's, or with --checkpoints above 0 the daemons' /api/runs
(the store lags by up to a checkpoint; a phase per value, side by side). The writer (a
thread of this process appending one row to every run each second,
bench_daemon.Writer) costs CPU of its own: this process's share is printed beside each
figure, and on PostgreSQL the server's (postmaster and its children). The 1-minute load
average is printed beside every figure: other jobs on the machine take cores from the
daemon.

Usage: python bench/bench_fleet.py [--runs 1000,3000,10000] [--replicas 3]
       [--replica-runs 3000] [--seconds 60] [--interval 10] [--lengths 1000,10000,100000]
       [--checkpoints 0,60] [--policy FILE ...]
       [--quick]   (one small scale phase, 2 replicas, short lengths: < 60 s)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, REPO]

import bench_daemon as bd  # noqa: E402
import bench_fleet_state  # noqa: E402

from tests.history import pgcluster  # noqa: E402

POLICIES = bench_fleet_state.POLICIES
RL_HEALTH = os.path.join(REPO, "policies", "rl-health.yaml")


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


# ---- what a phase reads -------------------------------------------------------------------
def committed(url: str) -> Callable[[], tuple[list[int], int | None]]:
    """A reader of the store's (points per run, polls committed in all): what the daemons
    have committed, whichever replica did it."""
    if url.startswith("postgresql://"):
        import psycopg

        def pg() -> tuple[list[int], int]:
            with psycopg.connect(url, autocommit=True) as conn:
                rows = conn.execute("SELECT points, polls FROM gkd_runs").fetchall()
            return [int(p) for p, _ in rows], sum(int(n) for _, n in rows)

        return pg

    def lite() -> tuple[list[int], int]:
        if not os.path.exists(url):
            return [], 0
        conn = sqlite3.connect(f"file:{url}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("SELECT points, polls FROM runs").fetchall()
        except sqlite3.OperationalError:  # the schema is not there yet
            rows = []
        finally:
            conn.close()
        return [int(p) for p, _ in rows], sum(int(n) for _, n in rows)

    return lite


def served(ports: list[int]) -> Callable[[], tuple[list[int], int | None]]:
    """With poll.checkpoint > 0 the store lags by up to a checkpoint: a reader of the
    points the daemons have judged, committed or held in memory (each daemon's /api/runs;
    a run shown by two replicas at a handover counts once, its larger figure). Its polls
    are read only at the window's ends (`judged_polls`): a /metrics scrape at 1,000 runs
    costs the daemon more CPU than a sample every 5 s should."""

    def api() -> tuple[list[int], int | None]:
        points: dict[str, int] = {}
        for port in ports:
            base = f"http://127.0.0.1:{port}"
            for r in httpx.get(f"{base}/api/runs", timeout=30).json()["runs"]:
                points[r["key"]] = max(points.get(r["key"], 0), int(r["points"]))
        return list(points.values()), None

    return api


def judged_polls(ports: list[int]) -> int:
    """The polls the daemons judged, committed or held: `gatekeeper_polls_total{outcome="ok"}`."""
    polls = 0
    for port in ports:
        for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text.splitlines():
            if line.startswith('gatekeeper_polls_total{outcome="ok"}'):
                polls += int(float(line.split()[-1]))
    return polls


def server_pids(url: str) -> list[int]:
    """The PostgreSQL postmaster serving `url` (found by its port) and its children."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    procs: dict[int, tuple[int, str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        procs[int(pid)] = (ppid, cmd)
    master = [p for p, (_, cmd) in procs.items() if "postgres" in cmd and f"-p {port} " in cmd]
    return master + [p for p, (ppid, _) in procs.items() if ppid in master]


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # a backend that ended meanwhile
            total += bd.cpu_seconds(pid)
    return total


# ---- one phase ------------------------------------------------------------------------------
@dataclass
class Phase:
    label: str
    runs: int
    state: str  # the store URL (a SQLite path or postgresql://)
    replicas: int = 1
    checkpoint: float = 0.0  # poll.checkpoint of its daemons
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


@contextlib.contextmanager
def running(phase: Phase, tmp: str, args: argparse.Namespace) -> Iterator[bd.Writer]:
    """The runs written to and the phase's daemons serving them, until the block ends."""
    paths, _, _ = bd.setup(tmp, phase.runs, args.interval, args.workers, args.policy, phase.state)
    for path in paths:  # the runs exist before the daemons start
        open(path, "w").close()
    writer = bd.Writer(paths)
    writer.start()
    try:
        for i in range(phase.replicas):
            port, cfg = bd.config(
                tmp,
                f"replica{i}",
                args.interval,
                args.workers,
                args.policy,
                phase.state,
                {"checkpoint": phase.checkpoint},
            )
            log = os.path.join(tmp, f"replica{i}.log")
            phase.daemons.append(bd.spawn(cfg, log, {"GATEKEEPER_REPLICA": f"bench-{i}"}))
            phase.ports.append(port)
        for port, daemon in zip(phase.ports, phase.daemons, strict=True):
            bd.wait_ready(f"http://127.0.0.1:{port}", daemon, f"daemon exited: see {tmp}")
        yield writer
    finally:
        writer.stop.set()
        for daemon in phase.daemons:
            daemon.terminate()
        for i, daemon in enumerate(phase.daemons):
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                print(f"  replica {i} did not stop within 60 s of SIGTERM: killed; where "
                      f"its threads were:\n{stacks(daemon, os.path.join(tmp, f'replica{i}.log'))}")
                daemon.kill()
                daemon.wait()
        lost = 0
        for i in range(phase.replicas):
            with open(os.path.join(tmp, f"replica{i}.log"), errors="replace") as fh:
                lost += sum("no longer holds its lease" in line for line in fh)
        print(f"  commits refused for a lease lost: {lost}")


def stacks(daemon: subprocess.Popen[bytes], log: str) -> str:
    """Every thread's stack of a hung `gatekeeper serve` (it writes them to its log on
    SIGUSR1), before the log goes with the bench's temporary folder."""
    start = os.path.getsize(log)
    daemon.send_signal(signal.SIGUSR1)
    time.sleep(2)
    with open(log, errors="replace") as fh:
        fh.seek(start)
        return fh.read()[-50_000:]


def measure(phase: Phase, writer: bd.Writer, args: argparse.Namespace) -> dict[str, object]:
    """Warm up, then sample every 5 s for --seconds: the phase's figures."""
    api = phase.checkpoint and not args.store_reads
    read = served(phase.ports) if api else committed(phase.state)

    def polls_now() -> int:
        n = judged_polls(phase.ports) if api else read()[1]
        assert n is not None
        return n

    server = server_pids(phase.state) if phase.state.startswith("postgresql://") else []
    pids = [d.pid for d in phase.daemons]
    time.sleep(args.warmup)
    polls0 = polls_now()  # before the CPU's start: a scrape is not the daemon's polling
    cpu0, own0, srv0 = [bd.cpu_seconds(p) for p in pids], time.process_time(), cpu_of(server)
    t0 = time.monotonic()
    rss = [0.0] * len(pids)
    lags: list[float] = []
    maxes: list[float] = []
    loads = []
    while time.monotonic() - t0 < args.seconds:
        time.sleep(min(5.0, max(0.5, args.seconds - (time.monotonic() - t0))))
        rss = [max(r, bd.rss_mb(p)) for r, p in zip(rss, pids, strict=True)]
        written = writer.steps
        points, polls = read()
        behind = sorted([written] * (phase.runs - len(points)) + [
            written - p / len(bd.METRICS) for p in points
        ])
        lags.append(behind[int(0.95 * (len(behind) - 1))])
        maxes.append(behind[-1])
        dt = time.monotonic() - t0
        loads.append(os.getloadavg()[0])
        cpus = [(bd.cpu_seconds(p) - c) / dt for p, c in zip(pids, cpu0, strict=True)]
        rate = "   —  " if polls is None else f"{(polls - polls0) / dt:6.1f}"
        print(
            f"    t={dt:4.0f}s polls/s {rate} of {phase.runs / args.interval:.0f} | cpu "
            + " ".join(f"{c:.2f}" for c in cpus)
            + f" | lag p95 {lags[-1]:.0f} max {behind[-1]:.0f} steps | {load()}",
            flush=True,
        )
    dt = time.monotonic() - t0
    cpus = [(bd.cpu_seconds(p) - c) / dt for p, c in zip(pids, cpu0, strict=True)]
    rate = (polls_now() - polls0) / dt
    # bounded: the worst run's lag at the end is no worse than in the first half (a run
    # the scheduler never reaches grows by a step a second while p95 may stay flat)
    half = maxes[: max(1, len(maxes) // 2)]
    return {
        "phase": phase.label,
        "runs": phase.runs,
        "replicas": phase.replicas,
        "checkpoint": phase.checkpoint,
        "cpu": cpus,
        "rss_mb": rss,
        "polls_per_s": rate,
        "needed_per_s": phase.runs / args.interval,
        "ms_per_poll": 1000 * sum(cpus) / rate if rate else float("nan"),
        "lag_p95": lags[-1],
        "lag_max": maxes[-1],
        "bounded": maxes[-1] <= max(half) + 2,
        "writer_cpu": (time.process_time() - own0) / dt,
        "server_cpu": (cpu_of(server) - srv0) / dt if server else None,
        "load": statistics.mean(loads),
    }


def report(r: dict[str, object]) -> None:
    cpus, rss = r["cpu"], r["rss_mb"]
    assert isinstance(cpus, list) and isinstance(rss, list)
    server = r["server_cpu"]
    print(
        f"  {r['phase']}: {r['runs']} runs, {r['replicas']} daemon(s), checkpoint "
        f"{r['checkpoint']:g}s: polls/s "
        f"{r['polls_per_s']:.0f} of {r['needed_per_s']:.0f} needed, "
        f"{r['ms_per_poll']:.2f} ms daemon CPU per poll | cpu per daemon "
        + ", ".join(f"{c:.2f}" for c in cpus)
        + " | rss MB "
        + ", ".join(f"{m:.0f}" for m in rss)
        + f" | lag p95 {r['lag_p95']:.0f} max {r['lag_max']:.0f} steps, "
        + ("bounded" if r["bounded"] else "GROWING")
        + f" | writer {r['writer_cpu']:.2f} core"
        + ("" if server is None else f" | PostgreSQL {server:.2f} core")
        + f" | load {r['load']:.1f}",
        flush=True,
    )


def phase_run(phase: Phase, args: argparse.Namespace) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="gk-bench-fleet-")
    if not phase.state.startswith("postgresql://"):
        phase.state = os.path.join(tmp, "state.db")
    print(
        f"  {phase.label}: {phase.runs} runs, {phase.replicas} daemon(s), checkpoint "
        f"{phase.checkpoint:g}s ... ({load()})"
    )
    try:
        with running(phase, tmp, args) as writer:
            result = measure(phase, writer, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(result)
    return result


def replica_phases(args: argparse.Namespace) -> list[dict[str, object]]:
    import psycopg

    out = []
    with pgcluster.cluster("max_connections=200") as server:
        for n in args.replica_counts:
            for every in args.checkpoints:
                db = f"fleet{n}_{int(every)}"
                with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE {db}")
                phase = Phase("replicas", args.replica_runs, f"{server}/{db}", n, every)
                out.append(phase_run(phase, args))
    return out


def lengths(args: argparse.Namespace) -> None:
    """Per policy set, one run per length: its state row and CPU per steady poll (in
    process, no scheduler), and the runs one core polls every --interval at that cost."""
    sets = [("shipped", POLICIES, args.lengths), ("rl-health", [RL_HEALTH], args.lengths[:1])]
    for name, paths, steps in sets:
        tmp = tempfile.mkdtemp(prefix="gk-bench-fleet-len-")
        try:
            for r in bench_fleet_state.measure(tmp, steps, args.polls, paths):
                ms = float(r["poll_cpu_ms"])  # type: ignore[arg-type]
                print(
                    f"  {name} ({r['rules']} rules), {r['steps']:>7} steps: state "
                    f"{r['state_bytes']:>8,} B, poll {ms:.2f} ms CPU in process = "
                    f"{1000 * args.interval / ms:,.0f} runs per core at {args.interval:g}s"
                    f" | {load()}",
                    flush=True,
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="1000,3000,10000", help="scale phase run counts")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--replica-runs", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--lengths", default="1000,10000,100000")
    ap.add_argument("--polls", type=int, default=30)
    ap.add_argument("--skip", default="", help="phases to skip: scale,replicas,length")
    ap.add_argument(
        "--checkpoints",
        default="0",
        help="poll.checkpoint values, seconds: each scale and replica phase runs once per "
        "value, side by side (e.g. 0,60)",
    )
    ap.add_argument(
        "--store-reads",
        action="store_true",
        help="read points and polls from the store in checkpoint phases too (no /api/runs "
        "every 5 s, whose 10,000 summaries cost the daemon; the lag then counts what is held)",
    )
    ap.add_argument(
        "--policy",
        action="append",
        help="policy file or directory the scale and replica phases' daemons judge by "
        "(repeatable; default: the shipped miles + rl-health policies). A one-rule policy "
        "measures what a poll costs besides its rules",
    )
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    args.policy = [os.path.abspath(p) for p in args.policy] if args.policy else POLICIES
    args.replica_counts = list(range(1, args.replicas + 1))
    if args.quick:
        args.runs, args.replica_runs, args.replica_counts = "200", 200, [2]
        args.seconds, args.interval, args.lengths, args.polls = 8, 4, "1000,10000", 5
    args.warmup = 2 * args.interval + 5 if not args.quick else args.interval + 3
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.checkpoints = [float(x) for x in args.checkpoints.split(",")]
    skip = set(args.skip.split(","))
    started = time.monotonic()
    print(
        f"runs x {len(bd.METRICS)} metrics x 1 step/s, "
        f"{'shipped policies' if args.policy == POLICIES else ' '.join(args.policy)}, poll every "
        f"{args.interval:g}s, {args.workers} workers; warm-up {args.warmup:g}s, measuring "
        f"{args.seconds:g}s per phase; {os.cpu_count()} cores, {load()}"
    )
    if "scale" not in skip:
        print("scale: one daemon, SQLite state")
        for n in (int(x) for x in args.runs.split(",")):
            for every in args.checkpoints:
                phase_run(Phase("scale", n, "sqlite", checkpoint=every), args)
    if "replicas" not in skip:
        print(f"replicas: {args.replica_runs} runs on one PostgreSQL state")
        replica_phases(args)
    if "length" not in skip:
        print("length: one run's poll and state by its length (bench_fleet_state.py)")
        lengths(args)
    print(f"done in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
