"""`flat: {window: 50, min_std: 0.01}` — collapse: the spread (std or max-min) of the
`window` points ending at a point is below a floor: "raw_reward saturates near a single
value", "entropy falls to ~0".
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field, model_validator

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt

BLOCK = 4096


def _rolling_std(values: np.ndarray, w: int) -> np.ndarray:
    """Population std of every w consecutive values, O(n) by running sums. Centering on
    the mean first keeps the sums small, so the difference of sums stays exact enough."""
    x = values - values.mean()
    c1 = np.concatenate([[0.0], np.cumsum(x)])
    c2 = np.concatenate([[0.0], np.cumsum(x * x)])
    s1, s2 = c1[w:] - c1[:-w], c2[w:] - c2[:-w]
    return np.sqrt(np.maximum(s2 / w - (s1 / w) ** 2, 0.0))


class Flat(MaskCheck):
    kind = "flat"
    window: int = Field(ge=2)
    min_std: float | None = Field(default=None, gt=0)
    min_range: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_floor(self) -> Flat:
        if (self.min_std is None) == (self.min_range is None):
            raise ValueError("flat takes exactly one of min_std or min_range")
        return self

    def context(self) -> int:
        return self.window - 1

    def _measure(self) -> str:
        return "std" if self.min_std is not None else "max-min"

    def _floor(self) -> float:
        return self.min_std if self.min_std is not None else float(self.min_range or 0)

    def describe(self) -> str:
        return f"{self._measure()} of every {self.window} points >= {fmt(self._floor())}"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        out = np.zeros(values.size - n_context, dtype=bool)
        w = self.window
        first = max(n_context, w - 1)  # first point that ends a full window
        if first >= values.size:
            return out
        part = values[first - w + 1 :]
        if self.min_std is not None:
            # blocks re-centred on their own mean keep running sums exact on trending series
            spread = np.concatenate(
                [
                    _rolling_std(part[lo : lo + BLOCK + w - 1], w)
                    for lo in range(0, part.size - w + 1, BLOCK)
                ]
            )
        else:
            windows = sliding_window_view(part, w)
            spread = windows.max(axis=1) - windows.min(axis=1)
        out[first - n_context :] = spread < self._floor()
        return out

    def explain(self, value: float) -> str:
        return (
            f"the {self.window} points ending at x = {fmt(value)} are flat: "
            f"{self._measure()} < {fmt(self._floor())}"
        )
