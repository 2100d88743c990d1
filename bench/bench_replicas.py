"""Issue 28's replica scenario, repeated: 3 `gatekeeper serve` replicas on a real
PostgreSQL state, kill -9 of one, a bad point during the takeover, a restart of all.

python bench/bench_replicas.py [--reps 20] [--runs 300] [--lease 4] [--pg URL] [--keep DIR]

Each repetition is tests/daemon/replica_scenario.py's `run_scenario` (the CI test
runs it once) on a fresh database and directory. A throwaway PostgreSQL cluster is
started as the tests start it (tests/history/conftest.py), unless `--pg` names a server
(postgresql://USER@HOST:PORT, no database; one database per repetition is created).
Prints one line per repetition and a final count; exits 1 when any repetition failed,
with that repetition's directory (replica logs and configs, the runs) kept under
`--keep` (default bench/out/replicas/).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
import pytest  # noqa: E402

from tests.daemon.replica_scenario import ScenarioResult, run_scenario  # noqa: E402
from tests.history import pgcluster  # noqa: E402


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url.rstrip("/")
        return
    with pgcluster.cluster() as base:  # the tests' own throwaway cluster
        yield base


def fresh_database(base: str, n: int) -> str:
    name = f"bench_replicas_{os.getpid()}_{n}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


def one(base: str, n: int, args: argparse.Namespace) -> ScenarioResult:
    tmp = Path(tempfile.mkdtemp(prefix=f"gk-replicas-{n}-"))
    try:
        try:
            result = run_scenario(
                tmp,
                fresh_database(base, n),
                runs=args.runs,
                lease=args.lease,
                checkpoint=args.checkpoint,
            )
        except Exception:  # a bug of the scenario itself: counted, its logs kept
            result = ScenarioResult(args.runs, args.lease, failures=[traceback.format_exc()])
        if not result.ok:
            kept = Path(args.keep) / f"rep-{n:02d}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(tmp, kept)
            (kept / "result.txt").write_text(result.report() + "\n")
            result.failures.append(f"logs kept in {kept}")
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def final_line(results: list[ScenarioResult]) -> str:
    passed = sum(r.ok for r in results)
    took = [r.takeover_s for r in results if r.takeover_s is not None]
    figures = f"{statistics.median(took):.2f}/{max(took):.2f} s" if took else "n/a"
    return (
        f"{passed}/{len(results)} passed: takeover p50/max {figures}, alerts exactly once "
        f"{sum(r.alerted_once for r in results)}/{len(results)}, restart lost "
        f"{sum(len(r.lost_verdicts) for r in results)}, dup "
        f"{sum(r.duplicates for r in results)}, double polls "
        f"{sum(len(r.double_polls) for r in results)}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--lease", type=float, default=4.0)
    ap.add_argument(
        "--checkpoint",
        type=float,
        default=0.0,
        help="the replicas' poll.checkpoint, seconds (0: every poll committed)",
    )
    ap.add_argument("--pg", help="postgresql://USER@HOST:PORT of a server to use")
    ap.add_argument("--keep", default=str(REPO / "bench" / "out" / "replicas"))
    args = ap.parse_args()
    results: list[ScenarioResult] = []
    started = time.monotonic()
    try:
        with server(args.pg) as base:
            for n in itertools.islice(itertools.count(1), args.reps):
                t0 = time.monotonic()
                results.append(one(base, n, args))
                print(f"[{n}/{args.reps}] {time.monotonic() - t0:.0f}s "
                      f"{results[-1].report()}", flush=True)  # fmt: skip
    except pytest.skip.Exception as exc:  # no PostgreSQL server binaries here
        print(f"bench_replicas: {exc.msg}; or give --pg URL", file=sys.stderr)
        return 2
    print(f"{time.monotonic() - started:.0f}s in all, load average {os.getloadavg()[0]:.1f}")
    print(final_line(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
