"""Reading an offline wandb run of 20,000 steps x 50 metrics (1M points): gatekeeper's
decoder vs the SDK's own decoding vs a bare scan, and `gatekeeper check` as a whole process.

    .venv/bin/python bench/bench_wandb.py [--steps N] [--out DIR] [--against DIR] [--strict]

The run is written once by the real SDK (WANDB_MODE=offline, in a child process) into
<out>/wandb-<steps>x50/ (default bench/out/) and reused. Then, side by side:

  scan        frame + CRC-check every record and parse it with the SDK's protobuf `Record`
              (the least any reader of this file must do);
  gatekeeper  `WandbLocalSource.read()`: the same, plus every history item into numpy
              columns on its define_metric step axis, in one process;
  sdk         the SDK's own decoding of the same records: `Record.FromString` and
              `wandb.sdk.lib.proto_util.dict_from_proto_list` (json.loads per value) into
              one dict per row, then per-metric columns. wandb 0.31 ships no Python reader
              of the file's framing (its reader is the Go wandb-core), so the frames come
              from our reader here too — which favours the SDK;
  check       `python -m gatekeeper check RUN -p POLICY -q` in a child process (start-up,
              `import wandb`, the read and the judging: what a user waits for); with
              --against DIR also the same command run from another checkout, interleaved.

Each round runs every reader once (interleaved, so a load spike hits them alike); the
best of --rounds (3) is kept, and the machine's load is printed beside the figures.

Budget (issue 25): `check` of a 1M-point run <= 3 s wall, whole process.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
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
BUDGET_S = 3.0
POLICY = """version: 1
name: bench-wandb
rules:
  - {id: loss, metric: train/m0, check: {max: 5}}
  - {id: reward, metric: rollout/m3, check: {min: -5}}
  - {id: perf, metric: perf/m1, check: {finite: true}}
"""


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


def cached_run(root: Path, steps: int) -> Path:
    out = root / f"wandb-{steps}x50"
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


def ours(wandb_dir: Path) -> int:
    from gatekeeper.sources.wandb.local import WandbLocalSource

    run = WandbLocalSource(str(wandb_dir)).read()
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


def check_process(wandb_dir: Path, policy: Path, tree: str) -> int:
    """`gatekeeper check` of the run in a child process, from the checkout `tree`."""
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, "-m", "gatekeeper", "check", str(wandb_dir), "-p", str(policy), "-q"]
    # run from the checkout, so no other `gatekeeper/` on the path shadows it
    proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"check from {tree} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.returncode


def timed(fn, *args):  # type: ignore[no-untyped-def]
    """(wall seconds, CPU seconds of this process and its finished children, result)."""
    def cpu() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
            resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    w, c = time.perf_counter(), cpu()
    out = fn(*args)
    return time.perf_counter() - w, cpu() - c, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=HERE / "out", help="where the run is cached")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; best of each")
    ap.add_argument("--no-sdk", action="store_true", help="skip the (slow) SDK decoding")
    ap.add_argument("--against", metavar="DIR", help="also time `check` from this checkout")
    ap.add_argument("--generate", metavar="DIR")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the budget is missed")
    args = ap.parse_args()
    if args.generate:
        generate(Path(args.generate), args.steps)
        return 0
    wandb_dir = cached_run(args.out, args.steps)
    path = log_file(wandb_dir)
    policy = wandb_dir.parent / "policy.yaml"
    policy.write_text(POLICY)
    import wandb.proto.wandb_internal_pb2  # noqa: F401  (import cost out of the timings)

    readers = {"scan": (scan, path), "gatekeeper": (ours, wandb_dir)}
    if not args.no_sdk:
        readers["sdk"] = (sdk, path)
    readers["check"] = (check_process, wandb_dir, policy, str(HERE.parent))
    if args.against:
        readers["check [against]"] = (check_process, wandb_dir, policy,
                                      os.path.abspath(args.against))
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    counts: dict[str, int] = {}
    loads = []
    for rnd in range(args.rounds):  # interleaved: each round runs every reader once
        loads.append(os.getloadavg()[0])
        for name, (fn, *fargs) in readers.items():
            w, c, counts[name] = timed(fn, *fargs)
            wall[name], cpu[name] = min(wall.get(name, w), w), min(cpu.get(name, c), c)
            print(f"  round {rnd + 1}: {name:16s} {w:7.2f} s wall {c:7.2f} s cpu", flush=True)
    load = f"load {min(loads):.1f}-{max(loads):.1f} (1-min average, {os.cpu_count()} cores)"
    print(f"file {path}: {os.path.getsize(path) / 1e6:.0f} MB, {counts['scan']} records, "
          f"{counts['gatekeeper']} points; best of {args.rounds} interleaved rounds, {load}")
    for name in readers:
        print(f"{name:16s} {wall[name]:7.2f} s wall {cpu[name]:7.2f} s cpu")
    print(f"gatekeeper vs scan: {cpu['gatekeeper'] / cpu['scan']:.2f}x cpu, "
          f"{wall['gatekeeper'] / wall['scan']:.2f}x wall")
    if "sdk" in cpu:
        print(f"sdk vs gatekeeper: {cpu['sdk'] / cpu['gatekeeper']:.2f}x cpu, "
              f"{wall['sdk'] / wall['gatekeeper']:.2f}x wall")
    if args.against:
        print(f"check vs --against: {wall['check'] / wall['check [against]']:.2f}x wall, "
              f"{cpu['check'] / cpu['check [against]']:.2f}x cpu")
    ok = wall["check"] <= BUDGET_S
    print(f"check, whole process: {wall['check']:.2f} s wall (budget <= {BUDGET_S:.0f} s) "
          f"{'OK' if ok else 'MISS'}; {load}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
