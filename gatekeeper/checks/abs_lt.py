"""`abs_lt: v` — every judged value x satisfies |x| < v (strict): miles' check_kl asserts
`abs(ppo_kl) < 1e-9`, and a value of exactly 1e-9 fails it."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt


class AbsLt(MaskCheck):
    kind = "abs_lt"
    value: float = Field(gt=0)  # |x| < 0 holds for nothing: a policy typo, not a bound

    def describe(self) -> str:
        return f"|x| < {fmt(self.value)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return ~(np.abs(values) < self.value)

    def explain(self, value: float) -> str:
        return f"|x| = {fmt(abs(value))} >= {fmt(self.value)}"
