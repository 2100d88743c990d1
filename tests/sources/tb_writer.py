"""A stand-in trainer logging scalars through tensorboardX's `SummaryWriter` (a real writer).

Usage: tb_writer.py LOGDIR --steps N [--delay S] [--bad-at STEP] [--nan-at STEP]
Logs `train/loss` (healthy: 1/(step+1), 5.0 at --bad-at, NaN at --nan-at) and
`train/ppo_kl` (0.0), flushing after every step so a tailing reader sees each one.
"""

from __future__ import annotations

import argparse
import time

from tensorboardX import SummaryWriter


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("logdir")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--nan-at", type=int, default=None)
    args = ap.parse_args()
    writer = SummaryWriter(args.logdir, flush_secs=1)
    for step in range(args.steps):
        loss = 1.0 / (step + 1)
        if step == args.bad_at:
            loss = 5.0
        if step == args.nan_at:
            loss = float("nan")
        writer.add_scalar("train/loss", loss, step)
        writer.add_scalar("train/ppo_kl", 0.0, step)
        writer.flush()
        time.sleep(args.delay)
    writer.close()


if __name__ == "__main__":
    main()
