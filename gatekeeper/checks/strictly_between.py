"""`strictly_between: [lo, hi]` — lo < x < hi, both ends open: miles' log-prob checker
asserts `0 < entropy < 0.7`, so an entropy of exactly 0 (a collapsed policy) fails."""

from __future__ import annotations

import numpy as np
from pydantic import model_validator

from gatekeeper.checks.between import Interval
from gatekeeper.fmt import fmt


class StrictlyBetween(Interval):
    kind = "strictly_between"

    @model_validator(mode="after")
    def _ordered(self) -> StrictlyBetween:
        if not self.lo < self.hi:
            raise ValueError(f"lo must be < hi, got [{fmt(self.lo)}, {fmt(self.hi)}]")
        return self

    def describe(self) -> str:
        return f"{fmt(self.lo)} < x < {fmt(self.hi)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return ~((values > self.lo) & (values < self.hi))

    def explain(self, value: float) -> str:
        side = "<=" if value <= self.lo else ">="
        bound = self.lo if value <= self.lo else self.hi
        return f"x = {fmt(value)} {side} {fmt(bound)} (outside ({fmt(self.lo)}, {fmt(self.hi)}))"
