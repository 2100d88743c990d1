"""A stand-in for a miles E2E test under `gatekeeper run --miles` (run as a child process):
it logs `miles_log` through one capture backend per process into the directory
MILES_CI_GATE_RECORD_DIR names, as miles does when the harness sets it, one step at a time.

    python fake_miles.py ROLLOUTS DELAY [BAD_STEP]

BAD_STEP: that train step logs ppo_kl = 0.05. Prints STEP n after each train step.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.miles.capture import CiCapture, Variant, miles_log  # noqa: E402


def main() -> int:
    rollouts, delay = int(sys.argv[1]), float(sys.argv[2])
    bad = int(sys.argv[3]) if len(sys.argv) > 3 else None
    record_dir = Path(os.environ["MILES_CI_GATE_RECORD_DIR"])
    procs = {"trainer": CiCapture(record_dir, 1201), "rollout": CiCapture(record_dir, 1202)}
    for process, metrics, step_key in miles_log(Variant(), rollouts):
        metrics = dict(metrics)
        if bad is not None and metrics.get("train/step") == bad:
            metrics["train/ppo_kl"] = 0.05
        procs[process].log(metrics, step_key)
        if process == "trainer":
            print(f"STEP {metrics['train/step']}", flush=True)
            time.sleep(delay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
