"""`between: [lo, hi]` — lo <= x <= hi, both ends inclusive."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import model_validator

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class Interval(MaskCheck):
    """The `[lo, hi]` parameters `between` and `strictly_between` share; no kind of its own
    (the registry lists only classes that set `kind`)."""

    lo: float
    hi: float

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        if isinstance(value, list) and len(value) == 2:
            return {"lo": value[0], "hi": value[1]}
        raise ValueError(f"{cls.kind} takes [lo, hi] or {{lo: .., hi: ..}}, got {value!r}")


class Between(Interval):
    kind = "between"

    @model_validator(mode="after")
    def _ordered(self) -> Between:
        if self.lo > self.hi:
            raise ValueError(f"lo must be <= hi, got [{fmt(self.lo)}, {fmt(self.hi)}]")
        return self

    def describe(self) -> str:
        return f"{fmt(self.lo)} <= x <= {fmt(self.hi)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return (values < self.lo) | (values > self.hi)

    def explain(self, value: float) -> str:
        side = "<" if value < self.lo else ">"
        bound = self.lo if value < self.lo else self.hi
        return f"x = {fmt(value)} {side} {fmt(bound)} (outside [{fmt(self.lo)}, {fmt(self.hi)}])"
