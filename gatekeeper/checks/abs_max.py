"""`abs_max: v` — judged by magnitude: |x| <= v. What a signed `x < v` assert meant."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class AbsMax(MaskCheck):
    kind = "abs_max"
    value: float = Field(ge=0)

    def describe(self) -> str:
        return f"|x| <= {fmt(self.value)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return np.abs(values) > self.value

    def explain(self, value: float) -> str:
        return f"|x| = {fmt(abs(value))} > {fmt(self.value)}"
