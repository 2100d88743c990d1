"""`gt: v` — every judged value x satisfies x > v (strict, signed)."""

from __future__ import annotations

import numpy as np

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class Gt(MaskCheck):
    kind = "gt"
    value: float

    def describe(self) -> str:
        return f"x > {fmt(self.value)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return ~(values > self.value)

    def explain(self, value: float) -> str:
        return f"x = {fmt(value)} <= {fmt(self.value)}"
