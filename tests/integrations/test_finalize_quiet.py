"""`Gate.finalize()` is quiet unless asked (issue 29): a library call in a child process
prints nothing on stdout by default, writes the files it was asked for, and prints the
console table only with `ReportOptions(quiet=False)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import REPO, write_policy

POLICY = """
version: 1
name: rl
rules:
  - id: loss-finite
    metric: train/loss
    check: {finite: true}
"""


def _trainer(tmp_path: Path, reports: str) -> subprocess.CompletedProcess[str]:
    pol = write_policy(tmp_path / "rl.yaml", POLICY)
    code = textwrap.dedent(f"""
        import gatekeeper
        from gatekeeper.gate import ReportOptions
        gate = gatekeeper.Gate({str(pol)!r}, echo=None{reports})
        for step in range(3):
            gate.observe(step, {{"train/loss": 1.0 / (step + 1)}})
        print("exit", gate.finalize().exit_code)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_finalize_prints_nothing_by_default(tmp_path):
    out = _trainer(tmp_path, "")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "exit 0\n" and out.stderr == ""


def test_finalize_writes_the_files_asked_for_and_still_prints_nothing(tmp_path):
    json_path = tmp_path / "gate.json"
    out = _trainer(tmp_path, f", reports=ReportOptions(json_path={str(json_path)!r})")
    assert out.stdout == "exit 0\n", out.stdout + out.stderr
    assert json.loads(json_path.read_text())["status"] == "pass"


def test_finalize_prints_the_table_when_asked(tmp_path):
    out = _trainer(tmp_path, ", reports=ReportOptions(quiet=False, verbose=True, color='never')")
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0].startswith("gate PASSED"), out.stdout + out.stderr
    assert any("rl/loss-finite" in line for line in lines) and lines[-1] == "exit 0"
