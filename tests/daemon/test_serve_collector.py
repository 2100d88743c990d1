"""`gatekeeper serve` as the program: the daemon is built with the cyclic collector paused
(its start-up, as `check` builds its policies), then frozen, and it polls with the
collector on at the daemon's threshold (cli/serve.py, issue 28: at Python's default the
collector took 7-15 % of the daemon's CPU at 1,000 runs and never collected anything)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from gatekeeper.cli.serve import GC_THRESHOLD
from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import write_config
from tests.helpers import REPO

PROBE = """
import gc, json, sys
from gatekeeper.daemon import service
seen = {}
build = service.Daemon._build
def probed_build(self, *a):
    seen['building'] = {'collector': gc.isenabled()}
    build(self, *a)
def probed_serve(self):
    seen['serving'] = {
        'collector': gc.isenabled(),
        'threshold': gc.get_threshold()[0],
        'daemon frozen': not any(o is self for o in gc.get_objects()),
        'stored run frozen': not any(o is r for o in gc.get_objects()
                                     for r in self.scheduler.records.values()),
        'stored runs': len(self.scheduler.records),
    }
    print(json.dumps(seen))
service.Daemon._build, service.Daemon.serve = probed_build, probed_serve
sys.argv = ['gatekeeper', 'serve', '-c', sys.argv[1], '--log-level', 'error']
from gatekeeper.cli.main import main
main()
"""


def test_serve_builds_the_daemon_without_the_collector_then_polls_with_it_at_its_threshold(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    rows = [{"train/step": s, "train/ppo_kl": 0.01, "train/loss": 1.0} for s in range(5)]
    (tmp_path / "runs" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a run in the state, so that the start restores it: one poll committed in process
    first = Daemon(load_config(str(config)))
    first.start()
    try:
        deadline = time.monotonic() + 30
        while not any(w.points for w in first.scheduler.snapshot()):
            assert time.monotonic() < deadline, "the run was never polled"
            time.sleep(0.05)
    finally:
        first.stop()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(config)], cwd=REPO, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen == {
        "building": {"collector": False},
        "serving": {
            "collector": True,
            "threshold": GC_THRESHOLD,
            "daemon frozen": True,
            "stored run frozen": True,
            "stored runs": 1,
        },
    }
