"""A stand-in trainer logging through the mlflow client.

Usage: mlflow_writer.py TRACKING_URI RUN_ID --steps N [--delay S] [--bad-at STEP]
Logs `train/loss` (1/(step+1), 5.0 at --bad-at) once per step, then ends the run FINISHED.
RUN_ID `new`: the writer creates the run itself (as a trainer does; a file store that does
not exist yet is created by the client) after `--wait` seconds, and writes its id to
`--id-file`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mlflow.tracking import MlflowClient


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("uri")
    ap.add_argument("run_id")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--wait", type=float, default=0.0)
    ap.add_argument("--id-file", default=None)
    args = ap.parse_args()
    time.sleep(args.wait)
    client = MlflowClient(args.uri)
    run_id = args.run_id
    if run_id == "new":
        run_id = client.create_run("0", run_name="cmd-run").info.run_id
        if args.id_file:
            Path(args.id_file).write_text(run_id)
    for step in range(args.steps):
        loss = 5.0 if step == args.bad_at else 1.0 / (step + 1)
        client.log_metric(run_id, "train/loss", loss, step=step)
        time.sleep(args.delay)
    client.set_terminated(run_id, "FINISHED")


if __name__ == "__main__":
    main()
