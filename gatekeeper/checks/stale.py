"""`stale: {max_seconds: S}` — while the run is live, a new point arrived within S seconds.

Catches a hung trainer: the process is alive but stopped logging. Wall time is not in
the points, so the live watcher passes `now` and the metric's last arrival time in
through the `EvalContext`; `check` on a finished run has neither and skips the rule. The
clock starts at the metric's first point (a trainer that never logs is what
`--idle-timeout` is for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
from gatekeeper.checks.conclusion import failed, passed
from gatekeeper.fmt import fmt
from gatekeeper.verdict import Status


@dataclass
class _StaleState:
    last_step: int | None = None
    points: int = 0


class Stale(AggregateCheck):
    kind = "stale"
    context_fields = ("now", "last_arrival")  # the wall clock: judged on every live verdict
    max_seconds: float = Field(gt=0)

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        return {"max_seconds": value}

    def describe(self) -> str:
        return f"a new point at least every {fmt(self.max_seconds)} s"

    def start(self) -> _StaleState:
        return _StaleState()

    def feed(self, state: _StaleState, steps: np.ndarray, values: np.ndarray) -> _StaleState:
        if steps.size:
            state.last_step = int(steps[-1])
            state.points += int(steps.size)
        return state

    def outcome(self, state: _StaleState, *, final: bool, ctx: EvalContext) -> Outcome:
        if final:
            return Outcome(Status.PASS, "run ended; staleness is judged only while it is live")
        if ctx.now is None or ctx.last_arrival is None:
            return Outcome(Status.SKIP, "stale is judged only by a live watch (watch, run)")
        idle = ctx.now - ctx.last_arrival
        limit, last = f"{fmt(self.max_seconds)} s", state.last_step
        if idle > self.max_seconds:
            hung = f"no new point for {idle:.1f} s > {limit} (last at step {last})"
            return failed(f"{hung}; the trainer looks hung", last, round(idle, 3), state.points)
        within = f"last point {idle:.1f} s ago (at step {last}), within {limit}"
        return passed(within, last, round(idle, 3), state.points)
