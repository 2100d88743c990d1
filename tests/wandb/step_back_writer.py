"""A trainer that logs a `define_metric` step going back, with the real wandb SDK (as a
child): `train/loss` on `train/global_step` 0..20 (2.0 at 16), then a resume from the
step-10 checkpoint logging 10..15 again (2.0 at 15) in the same run.

    python step_back_writer.py
"""

from __future__ import annotations

import wandb


def main() -> None:
    run = wandb.init(project="gk-tests", mode="offline")
    run.define_metric("train/global_step")
    run.define_metric("train/*", step_metric="train/global_step")
    for step, high in ((s, 16) for s in range(21)):
        run.log({"train/global_step": step, "train/loss": 2.0 if step == high else 0.5})
    for step in range(10, 16):  # the resume: the global step goes back to 10
        run.log({"train/global_step": step, "train/loss": 2.0 if step == 15 else 0.5})
    run.finish()


if __name__ == "__main__":
    main()
