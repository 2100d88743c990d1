"""A stand-in trainer run as a real child process by the live tests and the bench.

It writes `train/step` rows to a JSONL file (appended, flushed per row), or a miles
metric-history file rewritten by temp-file + rename on every log call (`--miles`).
Options let it turn bad at a step, stop logging (hung), ignore SIGTERM, spawn a
grandchild, write a line in two halves, and exit with a chosen code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("path", nargs="?", default=None)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--bad-at", type=int, action="append", default=[], help="step with kl=0.5")
    p.add_argument("--nan-at", type=int, default=None)
    p.add_argument(
        "--hang-after", type=int, default=None, help="stop logging after this step, stay alive"
    )
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--grandchild", default=None, help="file to write the grandchild's pid to")
    p.add_argument("--split-lines", action="store_true", help="write each line in two halves")
    p.add_argument("--miles", action="store_true", help="rewrite a miles record file by rename")
    p.add_argument("--end", action="store_true", help="write the end marker when done")
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--stamp", default=None, help="append 'step unix_time' per flushed row here")
    return p.parse_args(argv)


def _kl(a: argparse.Namespace, step: int) -> float:
    if a.nan_at == step:
        return math.nan
    return 0.5 if step in a.bad_at else 1e-10


class Appender:
    def __init__(self, path: str, split: bool):
        self.fh = open(path, "ab", buffering=0)
        self.split = split

    def log(self, step: int, kl: float, delay: float) -> None:
        line = (
            json.dumps(
                {"train/step": step, "train/ppo_kl": kl, "train/loss": 1.0 / (step + 1)}
            ).encode()
            + b"\n"
        )
        if self.split:
            half = len(line) // 2
            self.fh.write(line[:half])
            time.sleep(delay)
            self.fh.write(line[half:])
        else:
            self.fh.write(line)

    def end(self) -> None:
        self.fh.write(b'{"event": "end", "state": "finished"}\n')


class MilesFile:
    """miles' metric-history form: one line per metric with all its points; the whole
    file is written to a temp file and renamed over the record on every log call."""

    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, "metrics.jsonl")
        self.series: dict[str, list[list[float]]] = {"train/ppo_kl": [], "train/loss": []}
        self.ended = False

    def log(self, step: int, kl: float, delay: float) -> None:
        self.series["train/ppo_kl"].append([step, kl])
        self.series["train/loss"].append([step, 1.0 / (step + 1)])
        self._write()

    def end(self) -> None:
        self.ended = True
        self._write()

    def _write(self) -> None:
        tmp = os.path.join(os.path.dirname(self.path), ".metrics.jsonl.tmp")
        with open(tmp, "w") as fh:
            for name, points in self.series.items():
                fh.write(json.dumps({"metric": name, "series": points}) + "\n")
            if self.ended:
                fh.write('{"event": "end", "state": "finished"}\n')
        os.replace(tmp, self.path)


def main(argv: list[str]) -> int:
    a = _args(argv)
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.grandchild:
        gc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(a.grandchild, "w") as fh:
            fh.write(str(gc.pid))
    path = a.path or os.environ["MILES_CI_GATE_RECORD_DIR"]
    out = MilesFile(path) if a.miles else Appender(path, a.split_lines)
    for step in range(a.steps):
        out.log(step, _kl(a, step), a.delay)
        if a.stamp:
            with open(a.stamp, "a") as fh:
                fh.write(f"{step} {time.time():.6f}\n")
        if a.hang_after is not None and step >= a.hang_after:
            time.sleep(600)
        time.sleep(a.delay)
    if a.end:
        out.end()
    return a.exit


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
