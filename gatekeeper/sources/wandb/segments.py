"""The segments of a resumed wandb run, and where each segment's `_step`s go.

A run resumed with the same id (`wandb.init(id=..., resume="allow")`) writes one run
directory per process: `offline-run-<time>-<id>` (or `run-<time>-<id>` online). A reader
joins them oldest first. What the SDK (wandb 0.31, wandb-core) writes for each, as
`HistoryRecord.step.num` and the `_step` item, which `wandb sync` uploads unchanged:

- `wandb.log(row)` without `step=`: offline, `_step` restarts at the run record's
  `starting_step`, 0 (no server to ask for the last one). Such a segment, when it starts
  at or below the last `_step` read, is placed right after it.
- `wandb.log(row, step=s)`: `_step` is `s`, the step the user logged and the wandb UI
  shows; it is kept. The SDK marks the first such call with its telemetry feature
  `set_step_log`, written before the row it belongs to, so a segment whose `set_step_log`
  precedes its first row was numbered by the user, whatever its first step (0 included).
  Steps that go back within one process are dropped by the SDK with the warning "Tried to
  log to step N that is less than the current step M" and never reach the file. Across
  segments nothing is dropped offline: a resumed trainer that logs steps the earlier
  segment already holds leaves both points in the files, and both are judged.

The decision is made at each segment's first history row and kept, so a live watch
(record by record) and a whole read place every point on the same step.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

RUN_DIR_PREFIXES = ("run-", "offline-run-")


@dataclass
class StepJoin:
    """Where the `_step`s of the segment being read go (state kept in a live cursor)."""

    last: float = -1.0  # the highest `_step` placed so far, over every segment
    shift: float | None = None  # added to this segment's `_step`s; None before its first row
    user_steps: bool = False  # this segment's trainer passed `step=` before its first row

    def next_segment(self) -> None:
        self.shift, self.user_steps = None, False

    def place(self, steps: list[float], step_log_at: int | None) -> list[float]:
        """`steps` (the `_step` of each new row) as placed. `step_log_at`: how many of these
        rows came before the SDK's `set_step_log` telemetry, None if it was not among them."""
        if self.shift is None:
            if step_log_at == 0:
                self.user_steps = True
            if not steps:
                return steps
            restarted = not self.user_steps and steps[0] <= self.last
            self.shift = self.last + 1 if restarted else 0.0
        if self.shift:
            steps = [s + self.shift for s in steps]
        if steps:
            self.last = max(self.last, max(steps))
        return steps

    def to_json(self) -> dict[str, Any]:
        return {"last": self.last, "shift": self.shift, "user_steps": self.user_steps}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepJoin:
        shift = data.get("shift")
        return cls(
            last=float(data.get("last", -1.0)),
            shift=None if shift is None else float(shift),
            user_steps=bool(data.get("user_steps", False)),
        )


def earlier_segments(run_dir: str) -> list[str]:
    """The `.wandb` logs of earlier segments of the run in `run_dir` (resumed with the same
    id: `offline-run-<time>-<id>`, `run-<time>-<id>`), oldest first."""
    name = os.path.basename(os.path.normpath(run_dir))
    parts = name.rsplit("-", 2)
    if len(parts) != 3 or not name.startswith(RUN_DIR_PREFIXES):
        return []
    stamp, run_id = parts[1], parts[2]
    found = []
    for other in glob.glob(os.path.join(os.path.dirname(run_dir), f"*run-*-{run_id}")):
        other_stamp = os.path.basename(other).rsplit("-", 2)[1]
        log = find_log(other)
        if other_stamp < stamp and log is not None:
            found.append((other_stamp, log))
    return [log for _, log in sorted(found)]


def find_log(run_dir: str) -> str | None:
    """The run directory's `.wandb` transaction log (the newest, if several)."""
    found = sorted(glob.glob(os.path.join(run_dir, "*.wandb")), key=os.path.getmtime)
    return found[-1] if found else None
