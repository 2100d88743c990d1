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
        return np.abs(values - self.value) > self.tolerance

    def explain(self, value: float) -> str:
        return (
            f"x = {fmt(value)}, |x - {fmt(self.value)}| = {fmt(abs(value - self.value))} "
            f"> {fmt(self.tolerance)}"
        )
