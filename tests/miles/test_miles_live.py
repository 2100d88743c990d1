"""`gatekeeper run --miles -p policies/miles -- CMD`, as docs/miles.md tells a miles E2E test
to run: gatekeeper sets MILES_CI_GATE_RECORD_DIR, the child writes per-process capture
records there (as radixark/miles 31f1ca9's CiHistoryBackend does), and the gate stops the
child at the first rollout start whose ppo_kl miles' check_kl would reject."""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
