"""`spike: {window: 20, factor: 5}` — a point far from the median of the `window` points
before it, in units of their robust spread (MAD): "loss spikes", "kl_loss sudden jump".
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field

from gatekeeper.checks.base import MaskCheck, fmt

# MAD x 1.4826 estimates the standard deviation of normal noise, so `factor` reads as
# "this many sigmas" while one outlier inside the window cannot inflate it.
MAD_TO_SIGMA = 1.4826


class Spike(MaskCheck):
    kind = "spike"
    window: int = Field(default=20, ge=3)
    factor: float = Field(default=5.0, gt=0)
    direction: Literal["up", "down", "both"] = "up"
    # With a constant window MAD = 0 and any change would be "infinitely" far: min_scale
    # is the smallest spread a deviation is measured against.
    min_scale: float = Field(default=0.0, ge=0)

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"factor": value}
        raise ValueError(f"spike takes a factor or {{window: n, factor: k}}, got {value!r}")

    def context(self) -> int:
        return self.window

    def describe(self) -> str:
        side = {"up": "above", "down": "below", "both": "away from"}[self.direction]
        return (
            f"not more than {fmt(self.factor)} MAD-sigmas {side} the median of the "
            f"previous {self.window} points"
        )

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        out = np.zeros(values.size - n_context, dtype=bool)
        w = self.window
        first = max(n_context, w)  # first point with a full window before it
        if first >= values.size:
            return out
        # Row j holds the w points before point first + j.
        windows = sliding_window_view(values[first - w : values.size - 1], w)
        med = np.median(windows, axis=1)
        mad = np.median(np.abs(windows - med[:, None]), axis=1)
        scale = np.maximum(MAD_TO_SIGMA * mad, self.min_scale)
        dev = values[first:] - med
        if self.direction == "down":
            dev = -dev
        elif self.direction == "both":
            dev = np.abs(dev)
        out[first - n_context :] = dev > self.factor * scale
        return out

    def explain(self, value: float) -> str:
        return f"spike x = {fmt(value)}, expected {self.describe()}"
