"""A stand-in trainer logging to an existing MLflow run through the mlflow client.

Usage: mlflow_writer.py TRACKING_URI RUN_ID --steps N [--delay S] [--bad-at STEP]
Logs `train/loss` (1/(step+1), 5.0 at --bad-at) once per step, then ends the run FINISHED.
"""

from __future__ import annotations

import argparse
import time

from mlflow.tracking import MlflowClient


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("run_id")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--bad-at", type=int, default=None)
    args = ap.parse_args()
    client = MlflowClient(args.uri)
    for step in range(args.steps):
        loss = 5.0 if step == args.bad_at else 1.0 / (step + 1)
        client.log_metric(args.run_id, "train/loss", loss, step=step)
        time.sleep(args.delay)
    client.set_terminated(args.run_id, "FINISHED")


if __name__ == "__main__":
    main()
