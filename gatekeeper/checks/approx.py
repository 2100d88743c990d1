"""`approx: {value: v, rel: r, abs: a}` — |x - v| <= max(r*|v|, a)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class Approx(MaskCheck):
    kind = "approx"
    value: float
    rel: float = Field(default=0.0, ge=0)
    abs_: float = Field(default=0.0, ge=0, alias="abs")

    @model_validator(mode="after")
    def _some_tolerance(self) -> Approx:
        if self.rel == 0 and self.abs_ == 0:
            raise ValueError("give a tolerance: rel (relative) and/or abs (absolute), both >= 0")
        return self

    @property
    def tolerance(self) -> float:
        return max(self.rel * abs(self.value), self.abs_)

    def describe(self) -> str:
        return f"x = {fmt(self.value)} ± {fmt(self.tolerance)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        with np.errstate(over="ignore"):
            dist = np.abs(values - self.value)
            bad = dist > self.tolerance
            if np.isinf(self.tolerance):
                # both sides overflowed (value 1.7e308, rel 1.5, x -1.7e308: Inf > Inf is
                # false, a silent pass of 3.4e308 > 2.55e308): compared at a quarter of the
                # size, exact there; Inf against a finite side is right as it is
                over = np.isinf(dist)
                if over.any():
                    quarter = max(self.rel * (abs(self.value) / 4), self.abs_ / 4)
                    bad[over] = np.abs(values[over] / 4 - self.value / 4) > quarter
        return bad

    def explain(self, value: float) -> str:
        return (
            f"x = {fmt(value)}, |x - {fmt(self.value)}| = {fmt(abs(value - self.value))} "
            f"> {fmt(self.tolerance)}"
        )
