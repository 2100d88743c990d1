"""One-sided bounds: each of `max`, `min`, `lt`, `gt` (signed) and `abs_max`, `abs_lt`
(by magnitude) is its own module that names its comparison; `Bound` judges, describes and
explains them all. No kind of its own (the registry lists only classes that set `kind`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt

# A comparison a good value satisfies, and the one a violating value satisfies instead.
_HOLDS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "<=": np.less_equal,
    "<": np.less,
    ">=": np.greater_equal,
    ">": np.greater,
}
_BROKEN = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}


class Bound(MaskCheck):
    """x (or |x| when `magnitude`) `op` value, for every judged point."""

    op: ClassVar[str]  # a key of _HOLDS: what a good value satisfies
    magnitude: ClassVar[bool] = False  # judge |x|, not x
    value: float

    @property
    def _x(self) -> str:
        return "|x|" if self.magnitude else "x"

    def describe(self) -> str:
        return f"{self._x} {self.op} {fmt(self.value)}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        judged = np.abs(values) if self.magnitude else values
        return ~_HOLDS[self.op](judged, self.value)

    def explain(self, value: float) -> str:
        shown = abs(value) if self.magnitude else value
        return f"{self._x} = {fmt(shown)} {_BROKEN[self.op]} {fmt(self.value)}"
