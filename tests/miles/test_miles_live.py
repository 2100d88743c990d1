"""`gatekeeper run --miles -p policies/miles -- CMD`, as docs/miles.md tells a miles E2E test
to run: gatekeeper sets MILES_CI_GATE_RECORD_DIR, the child writes per-process capture
records there (as radixark/miles 31f1ca9's CiHistoryBackend does), and the gate stops the
child at the first rollout start whose ppo_kl miles' check_kl would reject."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, gatekeeper
from tests.miles.capture import Variant

FAKE = str(Path(__file__).with_name("fake_miles.py"))
FAST = ("--interval", "0.1", "--progress-every", "1")


def _run(tmp_path: Path, *child: str):
    return gatekeeper(
        "run", "--miles", "--source", str(tmp_path / "records"),
        "-p", str(REPO / "policies" / "miles"), *Variant().config_flags(), *FAST,
        "--json", str(tmp_path / "v.json"), "--", sys.executable, FAKE, *child,
    )


def test_run_stops_miles_at_a_bad_rollout_start(tmp_path: Path) -> None:
    proc = _run(tmp_path, "200", "0.05", "7")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["stopped"]["step"] == 7
    assert "STEP 150" not in proc.stdout  # stopped long before the end
    assert len(list((tmp_path / "records").glob("*.jsonl"))) == 2


def test_run_passes_a_healthy_miles_run(tmp_path: Path) -> None:
    proc = _run(tmp_path, "12", "0.01")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())
    results = {f"{r['policy']}/{r['rule']}": r for r in verdict["results"]}
    assert results["miles-ci-consistency/ppo-kl-rollout-start"]["status"] == "pass"
    clip = results["miles-ci-consistency/pg-clipfrac-rollout-start"]
    assert clip["status"] == "skip" and "if_logged" in clip["message"]


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_run_stops_a_trainer_elsewhere_and_its_setsid_workers_within_seconds(
    tmp_path: Path,
) -> None:
    """A relative `--source` still reaches a trainer that chdirs before writing; at the
    verdict, the trainer, its worker in a new session and that worker's own setsid child
    (a raylet and a Ray worker) are all gone within seconds, not after a 30 s grace."""
    elsewhere, pids = tmp_path / "elsewhere", tmp_path / "pids"
    elsewhere.mkdir()
    try:
        proc = gatekeeper(
            "run", "--miles", "--source", "records",
            "-p", str(REPO / "policies" / "miles"), *Variant().config_flags(), *FAST,
            "--json", "v.json", "--",
            sys.executable, FAKE, "--elsewhere", str(elsewhere), str(pids), "400", "0.05", "7",
            cwd=tmp_path,
        )
        ended = time.time()
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
        assert len(list((tmp_path / "records").glob("*.jsonl"))) == 2  # found: absolute
        assert not (elsewhere / "records").exists()
        stopped = json.loads((tmp_path / "v.json").read_text())["stopped"]
        assert stopped["step"] == 7 and stopped["signal_targets"][:2] == ["CMD", "group+2"]
        assert ended - stopped["signal_unix_times"]["SIGTERM"] < 5
        tree = [int(line) for line in pids.read_text().split()]
        assert len(tree) == 3 and all(_gone(pid) for pid in tree), tree
        beats = (elsewhere / "beat.txt").stat().st_size
        time.sleep(0.3)
        assert (elsewhere / "beat.txt").stat().st_size == beats  # nothing writes on
    finally:
        for pid in (int(p) for p in pids.read_text().split()) if pids.exists() else ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # a failed run leaves nothing behind
