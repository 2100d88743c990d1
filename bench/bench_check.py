"""Benchmark: `gatekeeper check` vs parsing the same JSONL with orjson alone.

Generates a 100,000-step x 50-metric run in both JSONL forms (cached under bench/out/),
then, side by side in one run, times in fresh child processes:
  parse-only   read the file and orjson.loads every line (what any reader must do)
  check        gatekeeper's whole `check`: load the 50-rule policy, parse into numpy
               columns, judge, verdict
interleaved (parse, check, parse, check, ...), best of R, and reports peak memory above
the interpreter's baseline against the size of the run's columns (int64 steps + float64
values: 100,000 x 50 x 8 bytes x 2 = 80 MB). Wall time decides the ratio; CPU time
(process_time, all threads) is printed beside it, as the machine is shared and its load
(os.getloadavg, printed before and after) moves wall times more than CPU times.

Targets (issue 14): record form check <= 1.2x parse-only, per-step rows <= 1.0x; peak
memory <= 2x the columns. Exit 0 when all hold, 1 otherwise.
Usage: python bench/bench_check.py [--steps N] [--metrics M] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def generate(steps: int, metrics: int) -> tuple[str, str, str]:
    os.makedirs(OUT, exist_ok=True)
    tag = f"{steps}x{metrics}"
    record, rows, policy = (
        os.path.join(OUT, f"{k}-{tag}.{e}")
        for k, e in (("record", "jsonl"), ("rows", "jsonl"), ("policy", "yaml"))
    )
    names = [f"train/m{i:02d}" for i in range(metrics)]
    if not (os.path.exists(record) and os.path.exists(rows)):
        rng = np.random.default_rng(0)
        data = rng.uniform(0.0, 1.0, (metrics, steps)).round(6)
        data[3, 4242] = np.nan
        with open(record, "w") as fh:
            for i, name in enumerate(names):
                pts = [[s, v] for s, v in zip(range(steps), data[i].tolist(), strict=True)]
                fh.write(json.dumps({"metric": name, "series": pts}).replace("NaN", '"NaN"') + "\n")
        with open(rows, "w") as fh:
            cols = data.T.tolist()
            for s in range(steps):
                row = {"train/step": s}
                row.update(zip(names, cols[s], strict=True))
                fh.write(json.dumps(row).replace("NaN", '"NaN"') + "\n")
    kinds = [
        "{abs_max: 2.0}", "{between: [-1, 2]}", "{max: 1.5}", "{min: -0.5}",
        "{approx: {value: 0.5, abs: 0.6}}", "{reach: {value: 0.9, by_step: 50000, window: 5}}",
    ]
    selections = ["all", "all", "[0]", "{from: 100, to: 90000}", "all"]
    with open(policy, "w") as fh:
        fh.write("version: 1\nname: bench\nrules:\n")
        for i, name in enumerate(names):
            kind = kinds[i % len(kinds)]
            steps_sel = "all" if "reach" in kind else selections[i % len(selections)]
            fh.write(f"  - {{id: r{i:02d}, metric: {name}, steps: {steps_sel}, check: {kind}}}\n")
    return record, rows, policy


CHILD = r"""
import sys, time
import orjson
import numpy, pydantic, yaml  # the baseline includes the libraries both would load
def hwm():  # peak RSS of this process (VmHWM; ru_maxrss is inherited across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
mode, path, policy = sys.argv[1:4]
if mode != "parse":
    from gatekeeper import gate
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
if mode == "parse":
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
else:
    verdict = gate.check(path, gate.load([policy], []))
    assert len(verdict.results) == 50
elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
print(f"{elapsed} {hwm() - base} {cpu}")
"""


def measure(
    mode: str, path: str, policy: str, tree: str | None = None
) -> tuple[float, float, float]:
    """(wall seconds, peak bytes above the baseline, CPU seconds) of one child; `tree`, a
    directory holding another gatekeeper package, is imported instead of this one."""
    env = dict(os.environ, PYTHONPATH=tree) if tree else None
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, path, policy],
        capture_output=True, text=True, check=True, env=env, cwd=tree,  # -c puts cwd first
    ).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", metavar="DIR",
                    help="also time `check` of the gatekeeper package in DIR (e.g. `git archive "
                         "<commit> gatekeeper | tar -x -C DIR`), interleaved with the others")
    args = ap.parse_args()
    t0 = time.perf_counter()
    record, rows, policy = generate(args.steps, args.metrics)
    mb = {k: os.path.getsize(p) / 1e6 for k, p in (("record", record), ("rows", rows))}
    sizes = f"record {mb['record']:.0f} MB, rows {mb['rows']:.0f} MB"
    print(f"data ready in {time.perf_counter() - t0:.1f}s ({sizes})")
    data_bytes = args.steps * args.metrics * 8 * 2  # int64 steps + float64 values
    ok = True
    print(f"load before (1/5/15 min): {load()}")
    targets = {"record form": 1.2, "per-step rows": 1.0}
    for label, path in (("record form", record), ("per-step rows", rows)):
        parse, check, before = [], [], []
        for _ in range(args.repeat):  # interleaved so machine noise hits both alike
            parse.append(measure("parse", path, policy))
            check.append(measure("check", path, policy))
            if args.compare:
                before.append(measure("check", path, policy, args.compare))
        # best of R: on a shared machine noise only ever adds time; memory: the worst
        p, c = min(t for t, _, _ in parse), min(t for t, _, _ in check)
        pc, cc = min(x for _, _, x in parse), min(x for _, _, x in check)
        mem = max(m for _, m, _ in check)
        ratio, cratio, mratio = c / p, cc / pc, mem / data_bytes
        ok &= ratio <= targets[label] and mratio <= 2
        print(f"{label:14} parse-only {p:6.2f}s  check {c:6.2f}s  ratio {ratio:4.2f}x "
              f"(target <= {targets[label]}x; CPU {pc:.2f}s vs {cc:.2f}s = {cratio:4.2f}x)  "
              f"peak +{mem / 1e6:5.0f} MB = {mratio:4.2f}x columns (target <= 2x)")
        if before:
            b, bc = min(t for t, _, _ in before), min(x for _, _, x in before)
            bm = max(m for _, m, _ in before)
            print(f"{'':14} --compare: check {b:6.2f}s  ratio {b / p:4.2f}x (CPU {bc:.2f}s = "
                  f"{bc / pc:4.2f}x)  peak +{bm / 1e6:5.0f} MB = {bm / data_bytes:4.2f}x columns")
    print(f"load after (1/5/15 min): {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
