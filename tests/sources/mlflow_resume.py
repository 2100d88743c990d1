"""A stand-in trainer resuming an MLflow run, as a restarted job does (mlflow 3.17.2).

Usage: mlflow_resume.py [--wait S] [--go FILE] [--by env|arg] [--run-id ID]
The run is the one in MLFLOW_RUN_ID (`--by env`: `mlflow.start_run()` resumes it) or named
by `--run-id` (`--by arg`: `mlflow.start_run(run_id=...)`), in MLFLOW_TRACKING_URI. After
`--wait` seconds, or once FILE exists (`--go`: the test creates it when the watch has read
the run as it was), it logs `train/loss` 5.0 at step 55 (below the run's old maximum, 69)
and healthy points at 56..59, then ends the run FINISHED (`mlflow.end_run()`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mlflow


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", type=float, default=0.0)
    ap.add_argument("--by", choices=["env", "arg"], default="env")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--go", type=Path, default=None)
    args = ap.parse_args()
    time.sleep(args.wait)
    until = time.monotonic() + 120
    while args.go is not None and not args.go.exists():
        if time.monotonic() > until:
            raise SystemExit(f"mlflow_resume: {args.go} not created in 120 s")
        time.sleep(0.05)
    with mlflow.start_run(run_id=args.run_id if args.by == "arg" else None):
        mlflow.log_metric("train/loss", 5.0, step=55)
        for step in range(56, 60):
            mlflow.log_metric("train/loss", 0.1, step=step)
            time.sleep(0.05)


if __name__ == "__main__":
    main()
