"""A stand-in for a miles E2E test under `gatekeeper run --miles` (run as a child process):
it logs `miles_log` through one capture backend per process into the directory
MILES_CI_GATE_RECORD_DIR names, as miles does when the harness sets it, one step at a time.

    python fake_miles.py ROLLOUTS DELAY [BAD_STEP] [--elsewhere DIR PIDFILE]

BAD_STEP: that train step logs ppo_kl = 0.05. Prints STEP n after each train step.
--elsewhere: chdir to DIR first (a relative record dir then points elsewhere), append
its pid to PIDFILE, and start a Ray-like worker tree in new sessions (ray_like.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.miles.capture import CiCapture, Variant, miles_log  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    if "--elsewhere" in args:
        at = args.index("--elsewhere")
        _elsewhere(*args[at + 1 : at + 3])
        del args[at : at + 3]
    rollouts, delay = int(args[0]), float(args[1])
    bad = int(args[2]) if len(args) > 2 else None
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


def _elsewhere(directory: str, pidfile: str) -> None:
    os.chdir(directory)
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    ray_like = str(Path(__file__).with_name("ray_like.py"))
    subprocess.Popen([sys.executable, ray_like, pidfile, "beat.txt", "--spawn"])


if __name__ == "__main__":
    sys.exit(main())
