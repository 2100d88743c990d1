"""`rise: {from_step: m, by_step: n, min: d}` — by step n the value has risen by at least d
over its value at step m: x(s) - x(m) >= d at some step m < s <= n. A recipe says this:
"eval/aime rises by >= 0.06 over eval@0 by eval@9". Steps are on the metric's own axis
(eval/step for eval/*); the value at step m is required. A finished run that ended
before step n without the rise is skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
from gatekeeper.checks.conclusion import failed, passed
from gatekeeper.fmt import fmt
from gatekeeper.verdict import Status


@dataclass
class _RiseState:
    base: float | None = None
    reached: tuple[int, float] | None = None  # step, value where the rise was reached
    best: tuple[int, float] | None = None  # step, value of the highest point after from_step
    last_step: int | None = None
    after: int = 0  # points in (from_step, by_step]


class Rise(AggregateCheck):
    kind = "rise"
    context_fields = ()
    from_step: int = Field(ge=0)
    by_step: int = Field(ge=0)
    min: float

    @model_validator(mode="after")
    def _ordered(self) -> Rise:
        if self.by_step <= self.from_step:
            raise ValueError(
                f"by_step ({self.by_step}) must be after from_step ({self.from_step})"
            )
        return self

    @classmethod
    def from_shorthand(cls, value: object) -> dict[str, object]:
        raise ValueError("rise takes a mapping: {from_step: m, by_step: n, min: d}")

    def describe(self) -> str:
        return f"x - x@{self.from_step} >= {fmt(self.min)} by step {self.by_step}"

    def start(self) -> _RiseState:
        return _RiseState()

    def feed(self, state: _RiseState, steps: np.ndarray, values: np.ndarray) -> _RiseState:
        if not steps.size:
            return state
        last = int(steps[-1])
        state.last_step = last if state.last_step is None else max(state.last_step, last)
        at_base = np.flatnonzero(steps == self.from_step)
        if at_base.size and state.base is None:
            state.base = float(values[at_base[0]])
        keep = (steps > self.from_step) & (steps <= self.by_step)
        if not keep.any() or state.reached is not None:
            return state
        steps, values = steps[keep], values[keep]
        if state.base is not None:
            hit = np.flatnonzero(values - state.base >= self.min)
            if hit.size:  # counted up to the point that reaches it, whatever the polls
                i = int(hit[0])
                steps, values = steps[: i + 1], values[: i + 1]
                state.reached = (int(steps[i]), float(values[i]))
        state.after += int(steps.size)
        j = int(np.argmax(values))
        if state.best is None or values[j] > state.best[1]:
            state.best = (int(steps[j]), float(values[j]))
        return state

    def outcome(self, state: _RiseState, *, final: bool, ctx: EvalContext) -> Outcome:
        done = final or (state.last_step is not None and state.last_step >= self.by_step)
        if state.base is None:
            if not done:
                return Outcome(Status.PENDING, f"waiting for step {self.from_step}")
            return Outcome(Status.ERROR, f"no value at step {self.from_step} to rise from")
        if state.reached is not None:
            step, value = state.reached
            span = f"from {fmt(state.base)} at step {self.from_step} to {fmt(value)}"
            rose = f"rose {fmt(value - state.base)} ({span}) by step {step}"
            return passed(rose, step, value, state.after + 1)
        if not done:
            return Outcome(
                Status.PENDING, f"not yet risen {fmt(self.min)}; waiting until step {self.by_step}"
            )
        if state.last_step is not None and state.last_step < self.by_step:
            # as `reach`: a run that ended before step n makes no claim about "by step n"
            return Outcome(
                Status.SKIP,
                f"the run ended at step {state.last_step}, before step {self.by_step}: "
                f"not yet risen {fmt(self.min)} is no failure of 'by step {self.by_step}'",
            )
        if state.best is None:
            return Outcome(
                Status.ERROR, f"no points after step {self.from_step} up to step {self.by_step}"
            )
        step, value = state.best
        only = f"rose only {fmt(value - state.base)} < {fmt(self.min)} by step {self.by_step}"
        best = f"from {fmt(state.base)} at step {self.from_step}; best {fmt(value)} at step {step}"
        return failed(f"{only} ({best})", step, value, state.after + 1)
