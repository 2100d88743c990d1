"""Live gating: follow a run while it is written and stop it when the gate fails.

gate.py (one poll: source -> Evaluation -> verdict and status changes) · progress.py
(status-change lines and the progress line) · process.py (the child's process group:
start, forward signals, SIGTERM -> grace -> SIGKILL) · descendants.py (the processes CMD
started that left its group, found through /proc) · loop.py (the poll loop that ties
them together for `gatekeeper watch` and `gatekeeper run`).
"""
