"""In-process gating: the same policies, judged inside the training loop.

gate.py (`Gate`: observe, submit, verdict, finalize; what to do on failure) · handoff.py
(the training thread hands values to the judge: its process, or a worker thread) · rows.py (logged
rows -> series, with the JSONL reader's step-axis rules) · loop.py (`GateLogger`, a
`log(dict)` hook for custom loops). Trainer callbacks live in `gatekeeper.integrations`.
"""

from __future__ import annotations

from gatekeeper.inprocess.gate import Gate, GateFailed, Mode, Observation, OnFail
from gatekeeper.inprocess.loop import GateLogger

__all__ = ["Gate", "GateFailed", "GateLogger", "Mode", "Observation", "OnFail"]
