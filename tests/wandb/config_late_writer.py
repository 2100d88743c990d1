"""A trainer whose config gains a key mid-run, with the real wandb SDK (as a child):
`train/loss` on `train/global_step` 0..9 (9.0 at step 4), then `run.config.update({"k":
3})` (a callback that learns a setting once training started), then steps 10..19.

    python config_late_writer.py
"""

from __future__ import annotations

import wandb


def main() -> None:
    run = wandb.init(project="gk-tests", mode="offline")
    run.define_metric("train/global_step")
    run.define_metric("train/*", step_metric="train/global_step")
    for step in range(10):
        run.log({"train/global_step": step, "train/loss": 9.0 if step == 4 else 1.0})
    run.config.update({"k": 3})
    for step in range(10, 20):
        run.log({"train/global_step": step, "train/loss": 1.0})
    run.finish()


if __name__ == "__main__":
    main()
