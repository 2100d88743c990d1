"""`lt: v` — every judged value x satisfies x < v (strict, signed): miles' `mtp_loss < 1.0`."""

from __future__ import annotations

import numpy as np

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class Lt(MaskCheck):
    kind = "lt"
    value: float

    def describe(self) -> str:
        return f"x < {fmt(self.value)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return ~(values < self.value)

    def explain(self, value: float) -> str:
        return f"x = {fmt(value)} >= {fmt(self.value)}"
