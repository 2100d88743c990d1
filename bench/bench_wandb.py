"""Reading a 100,000-step x 50-metric offline wandb run: gatekeeper vs the SDK vs a bare scan.

    .venv/bin/python bench/bench_wandb.py [--steps N] [--strict]

The run is written once by the real SDK (WANDB_MODE=offline, in a child process) into
bench/out/wandb-<steps>x50/ and reused. Then, in one process, side by side:

  scan        frame + CRC-check every record and parse it with the SDK's protobuf `Record`
              (the least any reader of this file must do);
  gatekeeper  `WandbLocalSource.read()`: the same, plus every history item into numpy
              columns on its define_metric step axis (forked workers, one per core;
              also timed in one process), history records decoded by the C extension
              (`gatekeeper/sources/wandb/_history.c`) when it is built;
  python      one process with the C decoder switched off (`decode.USE_C = False`): the
              pure-Python path an install without a C compiler takes;
  sdk         the SDK's own decoding of the same records: `Record.FromString` and
              `wandb.sdk.lib.proto_util.dict_from_proto_list` (json.loads per value) into
              one dict per row, then per-metric columns. wandb 0.31 ships no Python reader
              of the file's framing (its reader is the Go wandb-core), so the frames come
              from our reader here too — which favours the SDK.

Each round runs every reader once (interleaved, so a load spike hits them alike); the
best of --rounds (3) is kept, and the machine's load is printed with the ratios.

Targets (the issue): gatekeeper >= 5x faster than sdk, and <= 2x the scan time, both with
forked workers and in one process (CPU time: on a shared machine the steadier figure).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

METRICS = (
    [f"train/m{i}" for i in range(20)]
    + [f"rollout/m{i}" for i in range(15)]
    + [f"perf/m{i}" for i in range(12)]
)  # + train/step, rollout/step, eval/score = 50 metrics


def generate(out_dir: Path, steps: int) -> None:
    """Child-process body: log the run with the real SDK."""
    import wandb

    run = wandb.init(project="bench", mode="offline", dir=str(out_dir))
    for axis in ("train", "rollout", "eval"):
        run.define_metric(f"{axis}/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("rollout/*", step_metric="rollout/step")
    run.define_metric("perf/*", step_metric="rollout/step")
    for i in range(steps):
        row = {n: math.sin(i * 0.001 + j) for j, n in enumerate(METRICS)}
        row |= {"train/step": i, "rollout/step": i, "eval/score": i * 0.5}
        run.log(row)
    run.finish()


def cached_run(steps: int) -> Path:
    out = HERE / "out" / f"wandb-{steps}x50"
    done = out / "COMPLETE"
    if not done.exists():
        out.mkdir(parents=True, exist_ok=True)
        print(f"generating {steps} steps x 50 metrics with the wandb SDK into {out} ...")
        env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
        subprocess.run(
            [sys.executable, __file__, "--generate", str(out), "--steps", str(steps)],
            check=True, env=env,
        )
        done.write_text("ok\n")
    return out / "wandb"


def log_file(wandb_dir: Path) -> str:
    run_dir = Path(os.path.realpath(wandb_dir / "latest-run"))
    return str(next(run_dir.glob("*.wandb")))


def scan(path: str) -> int:
    from wandb.proto import wandb_internal_pb2 as pb

    from gatekeeper.sources.wandb.log import LogReader

    parse = pb.Record.FromString
    n = 0
    for raw in LogReader(path).records():
        parse(raw).WhichOneof("record_type")
        n += 1
    return n


def ours(wandb_dir: Path, parallel: bool = True, use_c: bool = True) -> int:
    from gatekeeper.sources.wandb import decode as wandb_decode
    from gatekeeper.sources.wandb.local import WandbLocalSource

    saved = wandb_decode.PARALLEL_MIN_BYTES, wandb_decode.USE_C, wandb_decode.FORK_WITH_C
    if not parallel:
        wandb_decode.PARALLEL_MIN_BYTES = 1 << 62
    wandb_decode.USE_C = use_c
    wandb_decode.FORK_WITH_C = parallel  # the forked reader, which the C path skips by default
    try:
        run = WandbLocalSource(str(wandb_dir)).read()
    finally:
        wandb_decode.PARALLEL_MIN_BYTES, wandb_decode.USE_C, wandb_decode.FORK_WITH_C = saved
    return sum(len(s) for s in run.series.values())


def sdk(path: str) -> int:
    import numpy as np
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.lib.proto_util import dict_from_proto_list

    from gatekeeper.sources.wandb.log import LogReader

    rows = []
    for raw in LogReader(path).records():
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            rows.append(dict_from_proto_list(rec.history.item))
    columns: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, int | float):
                columns.setdefault(key, []).append(value)
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    return sum(a.size for a in arrays.values())


def timed(fn, *args):  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds of this process, result). The CPU time leaves out forked
    workers, so it is kept only for the one-process readers."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return time.perf_counter() - w, time.process_time() - c, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best of each")
    ap.add_argument("--no-sdk", action="store_true", help="skip the (slow) SDK decoding")
    ap.add_argument("--no-python", action="store_true",
                    help="skip the one-process read with the C decoder off")
    ap.add_argument("--generate", metavar="DIR")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    if args.generate:
        generate(Path(args.generate), args.steps)
        return 0
    wandb_dir = cached_run(args.steps)
    path = log_file(wandb_dir)
    size = os.path.getsize(path) / 1e6
    import wandb.proto.wandb_internal_pb2  # noqa: F401  (import cost out of the timings)

    from gatekeeper.sources.wandb import decode as wandb_decode

    print(f"history decoder: {wandb_decode.c_decoder_status()}")
    readers = {
        "scan": (scan, path),
        "gatekeeper": (ours, wandb_dir),
        "1 process": (ours, wandb_dir, False),
    }
    if not args.no_python:
        readers["python"] = (ours, wandb_dir, False, False)
    if not args.no_sdk:
        readers["sdk"] = (sdk, path)
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    counts: dict[str, int] = {}
    loads = []
    for rnd in range(args.rounds):  # interleaved: each round runs every reader once
        loads.append(os.getloadavg()[0])
        for name, (fn, *fargs) in readers.items():
            w, c, counts[name] = timed(fn, *fargs)
            wall[name], cpu[name] = min(wall.get(name, w), w), min(cpu.get(name, c), c)
            print(f"  round {rnd + 1}: {name:10s} {w:7.2f} s wall {c:7.2f} s cpu", flush=True)
    load = f"load {min(loads):.1f}-{max(loads):.1f} (1-min average, {os.cpu_count()} cores)"
    print(f"file {path}: {size:.0f} MB, {counts['scan']} records, "
          f"{counts['gatekeeper']} points; best of {args.rounds} interleaved rounds, {load}")
    for name in readers:
        extra = "" if name == "gatekeeper" else f" {cpu[name]:7.2f} s cpu"
        print(f"{name:11s} {wall[name]:7.2f} s wall{extra}")
    one, one_cpu = wall["1 process"] / wall["scan"], cpu["1 process"] / cpu["scan"]
    forked = wall["gatekeeper"] / wall["scan"]
    ok_scan = forked <= 2
    print(f"gatekeeper (forked) vs scan: {forked:.2f}x the scan time (target <= 2x) "
          f"{'OK' if ok_scan else 'MISS'}")
    ok_one = one_cpu <= 2
    print(f"gatekeeper 1 process vs scan: {one_cpu:.2f}x cpu, {one:.2f}x wall (target <= 2x "
          f"cpu) {'OK' if ok_one else 'MISS'}; {load}")
    if "python" in cpu:
        print(f"pure-Python path, 1 process, vs scan: {cpu['python'] / cpu['scan']:.2f}x cpu, "
              f"{wall['python'] / wall['scan']:.2f}x wall; the C decoder's one process takes "
              f"{cpu['1 process'] / cpu['python']:.2f}x its cpu")
    ok_sdk = True
    if "sdk" in wall:
        speedup = wall["sdk"] / wall["gatekeeper"]
        ok_sdk = speedup >= 5
        print(f"gatekeeper vs sdk: {speedup:.2f}x faster (target >= 5x) "
              f"{'OK' if ok_sdk else 'MISS'}")
    return 1 if args.strict and not (ok_sdk and ok_scan and ok_one) else 0


if __name__ == "__main__":
    sys.exit(main())
