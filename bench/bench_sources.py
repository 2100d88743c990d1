"""Benchmark: reading TensorBoard event files, and the request count of an MLflow poll.

TensorBoard: writes (with tensorboardX, a real writer) one event file of `--tags` x
`--steps` scalars plus `--image-mb` of images, then times, on the same file:
  - gatekeeper's `TensorBoardSource.read()` (every scalar, both CRCs checked in C),
  - a raw scan of the records: the TFRecord framing with both CRCs, nothing decoded,
  - a framing-only walk (lengths only, no CRC, nothing decoded),
  - tensorboard's `EventAccumulator(size_guidance={'scalars': 0})` (keeps every scalar).
Targets (issue 15): gatekeeper >= 10x faster than EventAccumulator, <= 3x the raw scan.

MLflow (`--mlflow URI`, a running `mlflow server`): logs `--runs` runs of `--points` points,
then counts the requests of a poll of every run: per run (`MlflowSource.poll`, what the
daemon does for each watched run) and experiment-wide (`ExperimentPoller`, one run search).

Usage: python bench/bench_sources.py [--tags 50] [--steps 20000] [--image-mb 50]
       [--skip-accumulator] [--dir DIR]
       python bench/bench_sources.py --mlflow http://127.0.0.1:5000 [--runs 1000]
"""

from __future__ import annotations

import argparse
import glob
import os
import struct
import sys
import tempfile
import time

import numpy as np


def write_file(directory: str, tags: int, steps: int, image_mb: int) -> str:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(directory, max_queue=10000, flush_secs=3600)
    names = [f"train/metric_{i:02d}" for i in range(tags)]
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(3, 256, 256), dtype=np.uint8)  # ~196 KB, stored raw-ish
    per_image = 3 * 256 * 256
    images = max(0, image_mb * 1_000_000 // per_image)
    image_every = max(1, steps // images) if images else 0
    for step in range(steps):
        for name in names:
            writer.add_scalar(name, float(step % 97) / 97.0, step)
        if image_every and step % image_every == 0 and images:
            # PNG of noise does not compress: about 196 KB on disk each
            writer.add_image("samples/noise", rng.integers(0, 255, size=image.shape,
                                                           dtype=np.uint8), step)
            images -= 1
    writer.close()
    return glob.glob(os.path.join(directory, "events.out.tfevents.*"))[0]


def time_it(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def raw_scan(path: str) -> int:
    """Every record's framing and both CRCs (google-crc32c, C), nothing decoded: the least
    a reader that verifies records must do."""
    from gatekeeper.sources.tensorboard.records import crc32c_function, masked

    crc = crc32c_function()
    with open(path, "rb") as fh:
        data = fh.read()
    pos, n, header, footer = 0, 0, struct.Struct("<QI").unpack_from, struct.Struct("<I").unpack_from
    while pos + 12 <= len(data):
        length, length_crc = header(data, pos)
        payload = data[pos + 12 : pos + 12 + length]
        if masked(crc(data[pos : pos + 8])) != length_crc:
            raise ValueError(f"bad header at {pos}")
        if masked(crc(payload)) != footer(data, pos + 12 + length)[0]:
            raise ValueError(f"bad record at {pos}")
        pos += 16 + length
        n += 1
    return n


def framing_only(path: str) -> int:
    with open(path, "rb") as fh:
        data = fh.read()
    pos, n, unpack = 0, 0, struct.Struct("<Q").unpack_from
    while pos + 12 <= len(data):
        (length,) = unpack(data, pos)
        pos += 16 + length
        n += 1
    return n


def gatekeeper_read(path: str) -> int:
    from gatekeeper.sources.tensorboard import TensorBoardSource

    run = TensorBoardSource(path).read()
    return sum(len(s) for s in run.series.values())


def accumulator(path: str) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    return sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tags", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--image-mb", type=int, default=50)
    ap.add_argument("--skip-accumulator", action="store_true")
    ap.add_argument("--dir", default=None, help="reuse/keep the event file here")
    ap.add_argument("--mlflow", metavar="URI", help="only the MLflow poll bench, on this server")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--changed", type=int, default=10)
    args = ap.parse_args()
    if args.mlflow:
        bench_mlflow(args.mlflow, args.runs, args.points, args.changed)
        return 0
    directory = args.dir or tempfile.mkdtemp(prefix="bench-tb-")
    found = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
    start = time.perf_counter()
    path = found[0] if found else write_file(directory, args.tags, args.steps, args.image_mb)
    size = os.path.getsize(path)
    print(f"file: {path} ({size / 1e6:.1f} MB; written in {time.perf_counter() - start:.1f}s)")

    points = gatekeeper_read(path)
    print(f"scalars read by gatekeeper: {points:,}")
    t_gk = time_it(lambda: gatekeeper_read(path))
    t_raw = time_it(lambda: raw_scan(path))
    t_frame = time_it(lambda: framing_only(path))
    print(f"gatekeeper read        {t_gk:7.2f}s")
    print(f"raw scan (frame+CRC)   {t_raw:7.2f}s   gatekeeper / raw scan = {t_gk / t_raw:.2f}x")
    print(f"framing only (no CRC)  {t_frame:7.2f}s   gatekeeper / framing = {t_gk / t_frame:.2f}x")
    if not args.skip_accumulator:
        start = time.perf_counter()
        n = accumulator(path)
        t_acc = time.perf_counter() - start
        print(f"EventAccumulator       {t_acc:7.2f}s   ({n:,} scalars kept) "
              f"-> gatekeeper is {t_acc / t_gk:.1f}x faster")
    return 0



def bench_mlflow(uri: str, runs: int, points: int, changed: int) -> None:
    """Requests of one poll of a `runs`-run experiment, per run and experiment-wide."""
    import time as _time

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from gatekeeper.sources.mlflow.experiment import ExperimentPoller
    from gatekeeper.sources.mlflow.rest import RestClient
    from gatekeeper.sources.mlflow.source import MlflowSource, source_for

    client = MlflowClient(uri)
    exp = client.create_experiment(f"bench-{int(_time.time())}")
    start = _time.perf_counter()
    ids = []
    for i in range(runs):
        rid = client.create_run(exp, run_name=f"run-{i}").info.run_id
        now = int(_time.time() * 1000) - points
        metrics = [Metric("train/loss", 1.0, now + s, s) for s in range(points)]
        client.log_batch(rid, metrics=metrics)
        ids.append(rid)
    print(f"mlflow: logged {runs} runs x {points} points in {_time.perf_counter() - start:.0f}s")
    rest = RestClient(uri)
    per_run = [MlflowSource(source_for(uri, rid), client=rest) for rid in ids]
    poller = ExperimentPoller(uri, [exp], client=RestClient(uri))

    def poll_all() -> tuple[int, int, int, int]:
        before_a, before_b = rest.requests, poller.client.requests
        got_a = sum(src.poll().points for src in per_run)
        got_b = sum(p.points for p in poller.poll().values())
        return rest.requests - before_a, got_a, poller.client.requests - before_b, got_b

    for label in ("first poll (whole history)", "quiet poll (nothing new)"):
        a, pa, b, pb = poll_all()
        print(f"{label:34} per-run: {a:5} requests, {pa:7} points | "
              f"experiment: {b:5} requests, {pb:7} points")
    for rid in ids[:changed]:
        client.log_metric(rid, "train/loss", 0.5, step=points)
    a, pa, b, pb = poll_all()
    print(f"{f'{changed} runs with a new point':34} per-run: {a:5} requests, {pa:7} points | "
          f"experiment: {b:5} requests, {pb:7} points")


if __name__ == "__main__":
    sys.exit(main())
