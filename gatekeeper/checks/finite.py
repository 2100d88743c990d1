"""`finite: true` — every judged value is a number (the engine makes NaN/±Inf an error)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from gatekeeper.checks.base import MaskCheck


class Finite(MaskCheck):
    kind = "finite"
    value: Literal[True] = True

    def describe(self) -> str:
        return "finite"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return np.zeros(values.size - n_context, dtype=bool)
