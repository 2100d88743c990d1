"""A training script that logs to wandb the way a training library configures it (a child).

    python trainers.py STYLE STEPS [--bad-at S] [--raise-at S] [--null-after K]
                                   [--sleep S] [--exit-code N] [--ignore-sigterm]
                                   [--exit-on-sigterm] [--resume-id ID --start N]
                                   [--explicit-step] [--late-step S]

STYLE sets up `define_metric` as each library does, with plain `wandb.log`:
- `hf`: transformers' `WandbCallback.setup` (4.4x-4.5x): `define_metric("train/global_step")`
  and `define_metric("*", step_metric="train/global_step", step_sync=True)`; rows carry
  `train/loss`, `train/grad_norm`, `train/learning_rate` and a fractional `train/epoch`;
  at the end HF writes `train_loss`/`train_runtime` to the summary only (its
  `single_value_scalars`), never to the history. TRL's trainers log through this callback.
- `lightning`: Lightning 2.x `WandbLogger.experiment`: `define_metric("trainer/global_step")`
  and `define_metric("*", step_metric="trainer/global_step", step_sync=True)`.
- `plain`: `wandb.log(row)` on the default `_step` axis.

`--bad-at S` logs loss 50 at step S; `--raise-at S` raises (the SDK's excepthook finishes
the run with exit code 1); `--null-after K` logs `rewards/broken` as 1.0 for steps < K and
`None` after, as the field trial recorded from TRL with an all-NaN reward function.
`--explicit-step` passes `step=i` to `wandb.log`; `--late-step S` then logs loss 50 at step S
(below the last one: the SDK drops it with a warning).
Prints `STEP n UNIX_TIME` after each logged step.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import wandb

AXIS = {"hf": "train/global_step", "lightning": "trainer/global_step"}


def row(style: str, i: int, args: argparse.Namespace) -> dict[str, object]:
    loss = 50.0 if i == args.bad_at else 1.0 / (i + 1)
    if style == "hf":
        out: dict[str, object] = {
            "train/global_step": i, "train/loss": loss, "train/grad_norm": 0.5,
            "train/learning_rate": 1e-5, "train/epoch": i / 4,
        }
    elif style == "lightning":
        out = {"trainer/global_step": i, "train_loss": loss, "epoch": i // 4}
    else:
        out = {"loss": loss}
    if args.null_after is not None:
        out["rewards/broken"] = 1.0 if i < args.null_after else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("style", choices=("hf", "lightning", "plain"))
    ap.add_argument("steps", type=int)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--raise-at", type=int, default=None)
    ap.add_argument("--null-after", type=int, default=None)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--exit-on-sigterm", action="store_true")
    ap.add_argument("--resume-id", default=None, help="wandb.init(id=..., resume='allow')")
    ap.add_argument("--start", type=int, default=0, help="first step (a resumed trainer)")
    ap.add_argument("--reward-until", type=int, default=None, help="stop logging reward")
    ap.add_argument("--collide", action="store_true", help='log "gpu.mem" and {"gpu": {"mem"}}')
    ap.add_argument("--eval-on-epoch", action="store_true", help="eval/* on a fractional epoch")
    ap.add_argument("--explicit-step", action="store_true", help="wandb.log(row, step=i)")
    ap.add_argument("--late-step", type=int, default=None, help="log loss 50 at this step last")
    args = ap.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.exit_on_sigterm:  # as HF/Lightning-launched jobs often do: unwind, let wandb finish
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    resume = {"id": args.resume_id, "resume": "allow"} if args.resume_id else {}
    run = wandb.init(project="gk-real", mode="offline", config={"style": args.style}, **resume)
    axis = AXIS.get(args.style)
    if axis:
        run.define_metric(axis)
        run.define_metric("*", step_metric=axis, step_sync=True)
    if args.eval_on_epoch:  # a user's own setup: a fractional epoch as a step metric
        run.define_metric("eval/*", step_metric="epoch")
    for i in range(args.start, args.steps):
        if i == args.raise_at:
            raise RuntimeError(f"trainer failed at step {i}")
        logged = row(args.style, i, args)
        if args.reward_until is not None and i < args.reward_until:
            logged["reward"] = 0.9
        if args.collide:
            logged |= {"gpu.mem": float(i), "gpu": {"mem": 2.0 * i}}
        if args.eval_on_epoch:
            logged |= {"epoch": i / 4, "eval/loss": 2.0 / (i + 1)}
        run.log(logged, step=i if args.explicit_step else None)
        print(f"STEP {i} {time.time():.3f}", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    if args.late_step is not None:
        run.log({"loss": 50.0}, step=args.late_step)
    if args.style == "hf":
        run.summary["train_loss"] = 0.42
        run.summary["train_runtime"] = 12.5
    run.finish(exit_code=args.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
