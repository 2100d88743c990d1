"""In-process gating: the same policies, judged inside the training loop.

gate.py (`Gate`: observe, verdict, finalize; what to do on failure) · rows.py (logged
rows -> series, with the JSONL reader's step-axis rules) · loop.py (`GateLogger`, a
`log(dict)` hook for custom loops). Trainer callbacks live in `gatekeeper.integrations`.
"""

from __future__ import annotations

from gatekeeper.inprocess.gate import Gate, GateFailed, Observation, OnFail
from gatekeeper.inprocess.loop import GateLogger

__all__ = ["Gate", "GateFailed", "GateLogger", "Observation", "OnFail"]
