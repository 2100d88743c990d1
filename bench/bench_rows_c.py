"""Benchmark: the C rows reader against the Python ways, reading the same JSONL files.

Times `parse_file` (read, parse, columns, steps, join) with `reader.USE_C` on and off,
in fresh child processes, interleaved (C, Python, C, Python, ...), best of R, on:
  uniform   100,000 rows x 50 metrics of one key order (bench_check.py's rows file)
  trainer   transformers Trainer `log_history`-shaped rows, 200,000 train rows of 6
            fields, an eval row of 6 fields every 10 steps, a summary row (3 key orders)
Prints each ratio (C / Python) and the machine's load before and after. Both reads must
give the same columns (checked in the children by a digest of every chunk's bytes).
Usage: python bench/bench_rows_c.py [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
sys.path.insert(0, HERE)
from bench_check import generate  # noqa: E402


def trainer_file() -> str:
    path = os.path.join(OUT, "trainer-200000.jsonl")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(1)
    vals = rng.uniform(0, 3, (200_000, 4)).tolist()
    with open(path + ".tmp", "w") as fh:
        for s, (loss, gn, ev, rt) in enumerate(vals):
            fh.write(json.dumps({"loss": round(loss, 4), "grad_norm": gn,
                                 "learning_rate": 5e-05 * (1 - s / 200_000), "epoch": s / 1e4,
                                 "step": s}) + "\n")
            if s % 10 == 0:
                fh.write(json.dumps({"eval_loss": ev, "eval_runtime": rt,
                                     "eval_samples_per_second": 1 / (rt + 1),
                                     "epoch": s / 1e4, "step": s}) + "\n")
        fh.write(json.dumps({"train_runtime": 812.3, "train_loss": 1.1, "epoch": 20.0,
                             "step": 200_000}) + "\n")
    os.replace(path + ".tmp", path)
    return path


CHILD = r"""
import sys, time, hashlib
from gatekeeper.sources.jsonl import reader
from gatekeeper.sources.jsonl.reader import JsonlParser, parse_file
reader.USE_C = sys.argv[2] == "c"
t0 = time.perf_counter()
p = JsonlParser(sys.argv[1])
parse_file(p, final=True)
elapsed = time.perf_counter() - t0
h = hashlib.sha256()
for m in sorted(p.chunks):
    for s, v in p.chunks[m]:
        h.update(m.encode()); h.update(s.tobytes()); h.update(v.tobytes())
print(elapsed, h.hexdigest())
"""


def measure(path: str, mode: str) -> tuple[float, str]:
    out = subprocess.run([sys.executable, "-c", CHILD, path, mode], capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[0]), out[1]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    _, rows, _ = generate(100_000, 50)
    files = {"uniform": rows, "trainer": trainer_file()}
    from gatekeeper.sources.jsonl.reader import c_rows_status

    print(f"rows reader: {c_rows_status()}")
    print(f"load before (1/5/15 min): {load()}")
    for label, path in files.items():
        c, py = [], []
        for _ in range(args.repeat):
            c.append(measure(path, "c"))
            py.append(measure(path, "python"))
        assert len({d for _, d in c + py}) == 1, "C and Python columns differ"
        bc, bp = min(t for t, _ in c), min(t for t, _ in py)
        mb = os.path.getsize(path) / 1e6
        print(f"{label:8} {mb:4.0f} MB  C {bc:5.2f}s  Python ways {bp:5.2f}s  "
              f"ratio {bc / bp:4.2f}x  (same columns)")
    print(f"load after (1/5/15 min): {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
