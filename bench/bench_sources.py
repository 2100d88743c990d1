"""Benchmark: reading TensorBoard event files, and the request count of an MLflow poll.

TensorBoard: writes (with tensorboardX, a real writer) one event file of `--tags` x
`--steps` scalars plus `--image-mb` of images, then times, on the same file:
  - gatekeeper's `TensorBoardSource.read()` (every scalar, both CRCs checked in C),
  - a raw scan of the records: the TFRecord framing with both CRCs, nothing decoded,
  - a framing-only walk (lengths only, no CRC, nothing decoded),
  - tensorboard's `EventAccumulator(size_guidance={'scalars': 0})` (keeps every scalar).
Targets (issue 15): gatekeeper >= 10x faster than EventAccumulator, <= 3x the raw scan.

Usage: python bench/bench_sources.py [--tags 50] [--steps 20000] [--image-mb 50]
       [--skip-accumulator]
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
