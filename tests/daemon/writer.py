"""A trainer stand-in, run as a child process: appends per-step rows to a JSONL file.

python -m tests.daemon.writer PATH --steps N --period SECONDS [--bad-at STEP] [--end]

Each row is written in two halves with a flush between, so pollers see partial lines.
`--bad-at` makes train/ppo_kl jump to 0.5 from that step on; `--end` appends an end event.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--end", action="store_true")
    args = ap.parse_args()
    with open(args.path, "a", buffering=1) as fh:
        for step in range(args.steps):
            bad = args.bad_at is not None and step >= args.bad_at
            row = {
                "train/step": step,
                "train/ppo_kl": 0.5 if bad else 0.001,
                "train/loss": 1.0 / (step + 1),
            }
            line = json.dumps(row) + "\n"
            fh.write(line[: len(line) // 2])
            fh.flush()
            time.sleep(args.period / 2)
            fh.write(line[len(line) // 2 :])
            fh.flush()
            time.sleep(args.period / 2)
        if args.end:
            fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")


if __name__ == "__main__":
    main()
