"""Log a miles run with the real wandb SDK, as miles does (run as a child process).

    python wandb_writer.py SPEC.json

SPEC: {"config": {...}, "events": [{metric: value, ...}, ...]}; values "NaN", "Infinity",
"-Infinity" are logged as those floats. Axes as miles' `_init_wandb_common` declares them
(radixark/miles 31f1ca9, miles/utils/tracking_utils/wandb_utils.py): train/* on
train/step, rollout/*, multi_turn/*, passrate/* and perf/* on rollout/step, eval/* on
eval/step; miles passes `config=args.__dict__`, and each `tracking.log` is one `wandb.log`.
"""

from __future__ import annotations

import json
import sys

import wandb

_MARKERS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def main() -> int:
    with open(sys.argv[1]) as fh:
        spec = json.load(fh)
    run = wandb.init(project="gk-miles", mode="offline", config=spec["config"])
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("rollout/step")
    for ns in ("rollout", "multi_turn", "passrate", "perf"):
        run.define_metric(f"{ns}/*", step_metric="rollout/step")
    run.define_metric("eval/step")
    run.define_metric("eval/*", step_metric="eval/step")
    for event in spec["events"]:
        run.log({k: _MARKERS.get(v, v) if isinstance(v, str) else v for k, v in event.items()})
    run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
