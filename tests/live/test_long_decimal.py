"""A number of 20 significant digits is read as the number it is, whole and live.

The C rows reader read `9.2233720368547758080` (about 2**63 / 1e18) as 0.0, so a loss of
9.22 under `max: 5` gave `gate PASSED` (issue 25); `watch` and the daemon shared it. Here
the real CLI, in child processes, must fail the gate on that row, and the live source
must give the value as Python's float() reads the text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from gatekeeper.sources.jsonl.live import LiveJsonlSource
from tests.helpers import REPO, gatekeeper, write_policy

ROW = b'{"train/step": 1, "train/loss": 9.2233720368547758080}\n'
END = b'{"event": "end", "state": "finished"}\n'


def _policy(tmp_path: Path) -> Path:
    return write_policy(tmp_path / "loss.yaml", """
        version: 1
        name: long-decimal
        rules:
          - id: loss-max
            metric: train/loss
            check: {max: 5}
    """)


def _loss_rule(report: Path) -> dict[str, object]:
    (result,) = json.loads(report.read_text())["results"]
    return result


def test_check_fails_the_gate_on_a_20_digit_loss(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    # rows alone: the C reader declined a block with an end marker, and read this one
    run.write_bytes(b'{"train/step": 0, "train/loss": 1.5}\n' + ROW)
    out = gatekeeper("check", str(run), "-p", str(_policy(tmp_path)),
                     "--json", str(tmp_path / "v.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "gate FAILED" in out.stdout
    rule = _loss_rule(tmp_path / "v.json")
    assert (rule["status"], rule["step"], rule["value"]) == ("fail", 1, 9.223372036854776)


def test_watch_fails_the_gate_when_the_row_arrives_live(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_bytes(b'{"train/step": 0, "train/loss": 1.5}\n')
    watch = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "watch", str(run), "-p", str(_policy(tmp_path)),
         "--interval", "0.1", "--json", str(tmp_path / "w.json"), "--idle-timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        time.sleep(1.0)  # the first poll has read step 0 (a pass so far)
        with open(run, "ab") as fh:
            fh.write(ROW)
        time.sleep(1.0)  # polled alone, as the C reader read it; then the run ends
        with open(run, "ab") as fh:
            fh.write(END)
        out, err = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 1, out + err
    assert "no new point" not in out  # ended by the row and the end marker, not by idling
    rule = _loss_rule(tmp_path / "w.json")
    assert (rule["status"], rule["step"], rule["value"]) == ("fail", 1, 9.223372036854776)


def test_the_live_source_reads_the_value_as_float_reads_the_text(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    run.write_bytes(b'{"train/step": 0, "train/loss": 1.5}\n')
    src = LiveJsonlSource(str(run))
    first = src.poll()
    with open(run, "ab") as fh:
        fh.write(ROW)
    second = src.poll()
    assert first.series["train/loss"].values.tolist() == [1.5]
    assert second.series["train/loss"].values.tolist() == [float("9.2233720368547758080")]
