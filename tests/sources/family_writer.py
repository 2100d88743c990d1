"""One stand-in trainer, four real writers: the scenarios of test_family_scenarios.py.

    family_writer.py FAMILY TARGET [--start A] [--stop B] [--bad-at S] [--nonfinite-at S]
                     [--epochs-of K] [--resume ID] [--id-file F] [--delay D]

Logs `train/loss` = 1/(step+1) at steps A..B-1 (5.0 at --bad-at; NaN, +Inf, -Inf at
--nonfinite-at and the two steps after it), flushed after every step so a follower sees
each one. --epochs-of K: `val/loss` = 0.5 once per K steps, at the step of its epoch
number (0, 1, ...), on the same axis — what a trainer logging validation per epoch next to
loss per batch writes. --resume ID: the same run again (its id, for wandb and MLflow).
Each family through its real library, the versions pinned in the shared venv:

- jsonl: plain `json.dumps` lines appended per step, as miles' and HF's recorders write,
  with the end marker; a new run truncates the file (open "w"), a resumed one appends;
- wandb: the SDK (0.31) offline, `wandb.log(row, step=s)`, `resume="allow"` on --resume;
  `val/loss` on its declared `epoch` axis (the SDK drops a `step=` below the current one);
- tensorboard: torch's `torch.utils.tensorboard.SummaryWriter` (torch 2.13) in TARGET, the
  run directory; a resumed run is a second writer there (a second event file);
- mlflow: the fluent client (mlflow 3.17) on the store URI TARGET, `start_run(run_id=ID)` on
  --resume (as `MLFLOW_RUN_ID` does), the new run's id written to --id-file;
- prometheus: a prometheus_client 0.26 exporter on port TARGET (`train/loss` only, as the
  gauge `train_loss`), for a server to scrape.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Log = Callable[[str, float, int], None]


def loss(step: int, args: argparse.Namespace) -> float:
    if args.nonfinite_at is not None and 0 <= step - args.nonfinite_at <= 2:
        return (math.nan, math.inf, -math.inf)[step - args.nonfinite_at]
    return 5.0 if step == args.bad_at else 1.0 / (step + 1)


def points(args: argparse.Namespace) -> Iterator[tuple[str, float, int]]:
    """(metric, value, step) in the order a trainer logs them."""
    for step in range(args.start, args.stop):
        yield "train/loss", loss(step, args), step
        if args.epochs_of and (step + 1) % args.epochs_of == 0:
            yield "val/loss", 0.5, step // args.epochs_of


def write_jsonl(args: argparse.Namespace) -> None:
    path = Path(args.target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if args.resume else "w") as fh:
        for metric, value, step in points(args):
            fh.write(json.dumps({"step": step, metric: value}) + "\n")
            fh.flush()
            time.sleep(args.delay)
        fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")


def write_wandb(args: argparse.Namespace) -> None:
    import wandb

    run = wandb.init(project="families", mode="offline", id=args.resume, resume="allow"
                     if args.resume else None)
    run.define_metric("epoch")
    run.define_metric("val/*", step_metric="epoch")  # as Lightning and HF declare it
    last = 0
    for metric, value, step in points(args):
        if metric == "val/loss":  # on its own axis, logged at the current batch step
            run.log({"epoch": step, metric: value}, step=last)
        else:
            run.log({metric: value}, step=step)
            last = step
        time.sleep(args.delay)
    run.finish()


def write_tensorboard(args: argparse.Namespace) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(args.target, flush_secs=1)
    for metric, value, step in points(args):
        writer.add_scalar(metric, value, step)
        writer.flush()
        time.sleep(args.delay)
    writer.close()


def write_mlflow(args: argparse.Namespace) -> None:
    import mlflow

    mlflow.set_tracking_uri(args.target)
    with mlflow.start_run(run_id=args.resume) as run:
        if args.id_file:
            Path(args.id_file).write_text(run.info.run_id)
        for metric, value, step in points(args):
            mlflow.log_metric(metric, value, step=step)
            time.sleep(args.delay)


def write_prometheus(args: argparse.Namespace) -> None:
    """A prometheus_client exporter on port TARGET holding each value --delay seconds once
    a server has scraped it twice (a server's first scrape of a new target comes late)."""
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    registry = CollectorRegistry()  # the gauge alone, no process/GC collectors
    gauge = Gauge("train_loss", "loss", registry=registry)
    scrapes = Gauge("scrapes", "collect calls", registry=registry)
    scrapes.set_function(_count)  # called once per scrape
    start_http_server(int(args.target), addr="127.0.0.1", registry=registry)
    gauge.set(1.0)
    deadline = time.monotonic() + 60
    while _SCRAPED[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    for metric, value, _ in points(args):
        if metric == "train/loss":
            gauge.set(value)
            time.sleep(args.delay)


_SCRAPED = [0]


def _count() -> float:
    _SCRAPED[0] += 1
    return float(_SCRAPED[0])


WRITERS = {"jsonl": write_jsonl, "wandb": write_wandb, "tensorboard": write_tensorboard,
           "mlflow": write_mlflow, "prometheus": write_prometheus}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("family", choices=sorted(WRITERS))
    ap.add_argument("target")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop", type=int, default=20)
    ap.add_argument("--bad-at", type=int, default=None)
    ap.add_argument("--nonfinite-at", type=int, default=None)
    ap.add_argument("--epochs-of", type=int, default=0)
    ap.add_argument("--resume", default=None)
    ap.add_argument("--id-file", default=None)
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    WRITERS[args.family](args)


if __name__ == "__main__":
    main()
