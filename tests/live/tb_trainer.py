"""A stand-in trainer logging to TensorBoard through a real writer, run as a child process.

Usage: tb_trainer.py DIR [--lightning] [--steps N] [--delay S] [--bad-at STEP] [--nan-at STEP]
Default writer: torch 2.13's `torch.utils.tensorboard.SummaryWriter` writing into DIR (the
run directory). `--lightning`: Lightning 2.6's `TensorBoardLogger(DIR, name="")`, which
picks the next free `DIR/version_N` itself, as a Lightning trainer does. Logs `train/loss`
(healthy: 1/(step+1); 5.0 at --bad-at, NaN at --nan-at), flushed every step.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--lightning", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--nan-at", type=int, default=None)
    args = ap.parse_args()
    if args.lightning:
        from lightning.pytorch.loggers import TensorBoardLogger

        logger = TensorBoardLogger(args.dir, name="")
        for step in range(args.steps):
            logger.log_metrics({"train/loss": _loss(step, args)}, step=step)
            logger.experiment.flush()
            time.sleep(args.delay)
        logger.finalize("success")
        return
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(args.dir, flush_secs=1)
    for step in range(args.steps):
        writer.add_scalar("train/loss", _loss(step, args), step)
        writer.flush()
        time.sleep(args.delay)
    writer.close()


def _loss(step: int, args: argparse.Namespace) -> float:
    if step == args.nan_at:
        return float("nan")
    return 5.0 if step == args.bad_at else 1.0 / (step + 1)


if __name__ == "__main__":
    main()
