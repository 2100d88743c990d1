"""Shared pieces for the trainer tests: a policy, a JSONL recorder, report comparison.

The recorder is the test's own logger, independent of gatekeeper's callbacks: it writes
what the trainer logged as miles-style metric records (one line per metric, with its
step axis), which `gatekeeper check` then judges in a child process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import gatekeeper, marker, write_policy


def policy(path: Path, loss: str, grad_norm: str, extra: str = "") -> Path:
    """Health rules on one trainer's metric names."""
    return write_policy(
        path,
        f"""
        version: 1
        name: trainer-health
        rules:
          - id: loss-finite
            metric: {loss}
            check: {{finite: true}}
          - id: grad-norm-finite
            metric: {grad_norm}
            check: {{finite: true}}
          - id: loss-sane
            metric: {loss}
            check: {{max: 50}}
          - id: grad-norm-first
            metric: {grad_norm}
            steps: first
            check: {{between: [0, 100]}}
        {extra}
        """,
    )


class Recorder:
    """Collects (step, value) per metric, with the metric's axis, and writes records."""

    def __init__(self, axis: str):
        self.axis = axis
        self.series: dict[str, list[tuple[int, Any]]] = {}

    def add(self, step: int, metrics: dict[str, Any]) -> None:
        for name, value in metrics.items():
            self.series.setdefault(name, []).append((step, value))

    def write(self, path: Path) -> Path:
        with open(path, "w") as fh:
            for name, points in self.series.items():
                line = {"metric": name, "step_key": self.axis,
                        "series": [[s, marker(float(v))] for s, v in points]}
                fh.write(json.dumps(line) + "\n")
            fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")
        return path


def check_results(record: Path, policy_path: Path, out: Path) -> dict[str, Any]:
    """`gatekeeper check` on the recorded JSONL, in a child process: its JSON report."""
    proc = gatekeeper("check", str(record), "-p", str(policy_path), "--json", str(out), "-q")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(out.read_text())


def comparable(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-rule results: everything a reader of the gate relies on."""
    return report["results"]
