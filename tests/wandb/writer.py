"""A training script that logs a miles-shaped run with the real wandb SDK (run as a child).

    python writer.py STEPS [--sleep S] [--exit-code N] [--forever]

Axes as miles declares them: `train/*` on `train/step`, `rollout/*` and `perf/*` on
`rollout/step` (one rollout every 2 train steps), `eval/*` on `eval/step` (every 10 steps).
`train/grad_norm` is NaN at step 5 and +Inf at step 6; `sys.gpu.mem` is a nested key on
`_step`. With --forever it keeps logging until killed.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import wandb


def expected_loss(i: int) -> float:
    return 1.0 / (i + 1)


def grad_norm(i: int) -> float:
    return math.nan if i == 5 else math.inf if i == 6 else 0.5 + 0.001 * i


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--forever", action="store_true")
    args = ap.parse_args()
    run = wandb.init(
        project="gk-tests", mode="offline", tags=["ci", "grpo"],
        config={"lr": 1e-6, "model": {"name": "qwen3-4b"}, "lora_rank": 8},
    )
    for axis in ("train/step", "rollout/step", "eval/step"):
        run.define_metric(axis)
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("rollout/*", step_metric="rollout/step")
    run.define_metric("perf/*", step_metric="rollout/step")
    run.define_metric("eval/*", step_metric="eval/step")
    steps = itertools.count() if args.forever else range(args.steps)
    for i in steps:
        row = {
            "train/step": i, "train/loss": expected_loss(i), "train/ppo_kl": 0.0,
            "train/grad_norm": grad_norm(i), "sys": {"gpu": {"mem": float(i)}},
        }
        if i % 2 == 0:
            row |= {"rollout/step": i // 2, "rollout/raw_reward": i / 1000.0,
                    "perf/step_time": 1.5}
        if i % 10 == 0:
            row |= {"eval/step": i // 10, "eval/score": i / 10.0}
        run.log(row)
        if args.sleep:
            time.sleep(args.sleep)
        if i == args.steps - 1:
            print("LOGGED", flush=True)  # the first STEPS steps are handed to wandb
    run.finish(exit_code=args.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
