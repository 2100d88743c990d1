"""`reach: {value: v, by_step: n, window: k, direction: up|down}` — the k-point rolling
mean gets to v (>= v going up, the default; <= v going down) at some step <= n. Recipes
say this: "raw_reward above 0.75 within 80 steps (5-step means)", "eval/loss below 1.0
by step 100". A finished run that ended before step n is skipped with the reason: the
claim is about step n.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome, window_means
from gatekeeper.checks.conclusion import failed, passed
from gatekeeper.fmt import fmt
from gatekeeper.verdict import Status


@dataclass
class _ReachState:
    tail: np.ndarray = field(default_factory=lambda: np.empty(0))  # last k-1 values <= by_step
    reached_step: int | None = None
    reached_value: float | None = None
    best: float | None = None  # best full-window mean seen so far
    best_step: int | None = None
    last_step: int | None = None
    judged: int = 0


class Reach(AggregateCheck):
    kind = "reach"
    context_fields = ()
    value: float
    by_step: int = Field(ge=0)
    window: int = Field(default=1, ge=1)
    direction: Literal["up", "down"] = "up"

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        raise ValueError(
            "reach takes a mapping: {value: v, by_step: n, window: k, direction: up|down}"
        )

    @property
    def _op(self) -> str:
        return ">=" if self.direction == "up" else "<="

    def _sign(self) -> float:
        """Going down is going up on -x: one code path, the bound and best mirrored."""
        return 1.0 if self.direction == "up" else -1.0

    def describe(self) -> str:
        mean = f"{self.window}-point mean" if self.window > 1 else "x"
        return f"{mean} {self._op} {fmt(self.value)} by step {self.by_step}"

    def start(self) -> _ReachState:
        return _ReachState()

    def feed(self, state: _ReachState, steps: np.ndarray, values: np.ndarray) -> _ReachState:
        if steps.size:
            state.last_step = int(steps[-1]) if state.last_step is None else max(
                state.last_step, int(steps[-1])
            )
        keep = steps <= self.by_step
        steps, values = steps[keep], values[keep]
        # every point by the deadline counts, reached or not: the count is the same
        # whatever the polls (it was not once the mean was reached mid-poll)
        first = state.judged - state.tail.size  # the number of joined[0] among them
        state.judged += int(values.size)
        if state.reached_step is not None or not values.size:
            return state
        joined = np.concatenate([state.tail, values])
        k = self.window
        if joined.size >= k:
            means = window_means(joined, k, first)  # means[i] ends at joined[i + k - 1]
            ends = np.arange(k - 1, joined.size) - state.tail.size  # index into values
            valid = ends >= 0
            means, ends = means[valid], ends[valid]
            if means.size:
                sign = self._sign()
                hit = np.flatnonzero(means * sign >= self.value * sign)
                if hit.size:
                    i = int(hit[0])
                    state.reached_step = int(steps[ends[i]])
                    state.reached_value = float(means[i])
                j = int(np.argmax(means * sign))
                if state.best is None or means[j] * sign > state.best * sign:
                    state.best, state.best_step = float(means[j]), int(steps[ends[j]])
        state.tail = joined[-(k - 1) :] if k > 1 else np.empty(0)
        return state

    def outcome(self, state: _ReachState, *, final: bool, ctx: EvalContext) -> Outcome:
        what = f"{self.window}-point mean" if self.window > 1 else "value"
        if state.reached_step is not None:
            reached = f"{fmt(state.reached_value)} {self._op} {fmt(self.value)}"
            return passed(
                f"{what} reached {reached} at step {state.reached_step}",
                state.reached_step,
                state.reached_value,
                state.judged,
            )
        deadline_passed = state.last_step is not None and state.last_step >= self.by_step
        if not (final or deadline_passed):
            return Outcome(
                Status.PENDING,
                f"not yet {fmt(self.value)}; waiting until step {self.by_step}",
                judged=state.judged,
            )
        if not deadline_passed and state.last_step is not None:
            # a run that ended before the deadline makes no claim about it: "above 0.75
            # within 80 steps" says nothing of a 50-step run (a run with no points errors)
            return Outcome(
                Status.SKIP,
                f"the run ended at step {state.last_step}, before step {self.by_step}: "
                f"not yet {fmt(self.value)} is no failure of 'by step {self.by_step}'",
                judged=state.judged,
            )
        if state.best is None:
            if state.judged == 0:
                return Outcome(
                    Status.ERROR,
                    f"no points at or before step {self.by_step} to judge",
                    judged=0,
                )
            return Outcome(
                Status.ERROR,
                f"only {state.judged} point(s) at or before step {self.by_step}; a "
                f"{self.window}-point mean needs {self.window}",
                judged=state.judged,
            )
        best = f"best {fmt(state.best)} at step {state.best_step}"
        never = f"{what} never reached {fmt(self.value)} by step {self.by_step} ({best})"
        return failed(never, state.best_step, state.best, state.judged)
