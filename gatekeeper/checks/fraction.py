"""`fraction: {above: 0.999, max: 0.2}` — the share of selected points at or above (or at
or below) a threshold stays within bounds: "grad_norm repeatedly hitting the clip".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
from gatekeeper.fmt import fmt
from gatekeeper.verdict import Status


@dataclass
class _FractionState:
    points: int = 0
    hits: int = 0
    first_hit: tuple[int, float] | None = None


def _pct(share: float) -> str:
    return f"{share * 100:.3g}%"


class Fraction(AggregateCheck):
    kind = "fraction"
    context_fields = ()
    above: float | None = None
    below: float | None = None
    max: float | None = Field(default=None, ge=0, le=1)
    min: float | None = Field(default=None, ge=0, le=1)
    # The share of a handful of points says little; fewer than this is "not enough data".
    min_points: int = Field(default=1, ge=1)
    # A share can move either way with every new point, so a live run is judged on it
    # only once its selection is complete (or the run ended): `check` and a completed
    # `run` agree. `live: true` judges the share so far, and may stop a run that the
    # whole run would pass — only when asked.
    live: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> Fraction:
        if (self.above is None) == (self.below is None):
            raise ValueError("fraction takes exactly one of above or below (the threshold)")
        if self.max is None and self.min is None:
            raise ValueError("fraction needs max and/or min: the allowed share, 0..1")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min ({fmt(self.min)}) must be <= max ({fmt(self.max)})")
        return self

    def _hit_words(self) -> str:
        if self.above is not None:
            return f">= {fmt(self.above)}"
        return f"<= {fmt(self.below)}"

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"at least {_pct(self.min)}")
        if self.max is not None:
            parts.append(f"at most {_pct(self.max)}")
        return f"{' and '.join(parts)} of points {self._hit_words()}"

    def start(self) -> _FractionState:
        return _FractionState()

    def feed(self, state: _FractionState, steps: np.ndarray, values: np.ndarray) -> _FractionState:
        hit = values >= self.above if self.above is not None else values <= float(self.below or 0)
        state.points += int(values.size)
        n_hits = int(hit.sum())
        if n_hits and state.first_hit is None:
            i = int(np.argmax(hit))
            state.first_hit = (int(steps[i]), float(values[i]))
        state.hits += n_hits
        return state

    def outcome(self, state: _FractionState, *, final: bool, ctx: EvalContext) -> Outcome:
        if state.points < self.min_points:
            return Outcome(
                Status.ERROR if final else Status.PENDING,
                f"needs {self.min_points} points to judge a share, has {state.points}",
                judged=state.points,
            )
        share = state.hits / state.points
        seen = f"{state.hits} of {state.points} points ({_pct(share)}) {self._hit_words()}"
        step, _ = state.first_hit or (None, None)
        if not final and not self.live:
            return Outcome(
                Status.PENDING,
                f"so far {seen}; the share is judged when the run ends (live: true judges it "
                "while the run is live)",
                value=share,
                judged=state.points,
            )
        too_many = self.max is not None and share > self.max
        too_few = self.min is not None and share < self.min
        if too_many or too_few:
            bound = (
                f"at most {_pct(self.max or 0)}" if too_many else f"at least {_pct(self.min or 0)}"
            )
            first = f"; first at step {step}" if step is not None else ""
            return Outcome(  # no step: the observed value is the share of the selection
                Status.FAIL,
                f"share {seen}, expected {bound}{first}",
                value=share,
                violations=state.hits,
                judged=state.points,
            )
        return Outcome(
            Status.PASS, f"{seen}, within {self.describe()}", value=share, judged=state.points
        )
