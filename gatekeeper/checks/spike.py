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
BLOCK = 4096


def median_and_mad(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of each row. One sort per row (of a contiguous copy: ~2x faster than
    sorting the strided view); the MAD then needs no second sort: the deviations below and
    above the median are two ascending runs, and an order statistic of their merge is a
    min over max of O(window) elementwise steps (on columns, made contiguous)."""
    rows = windows.copy()
    rows.sort(axis=1)
    cols = np.ascontiguousarray(rows.T)  # cols[j] = j-th smallest of every window
    w = cols.shape[0]
    k = w // 2
    if w % 2:
        med = cols[k]
        below, above = med - cols[k - 1 :: -1], cols[k + 1 :] - med
        return med, _kth_merged(below, above, k)  # the median's own 0 is the smallest
    med = 0.5 * (cols[k - 1] + cols[k])
    below, above = med - cols[k - 1 :: -1], cols[k:] - med
    return med, 0.5 * (_kth_merged(below, above, k) + _kth_merged(below, above, k + 1))


def _kth_merged(a: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    """Per column, the m-th smallest (1-based) of a[:, col] and b[:, col], both ascending
    with k entries: the min over i (entries taken from a) of max(a[i-1], b[m-i-1])."""
    k = a.shape[0]
    best = np.full(a.shape[1], np.inf)
    for i in range(max(0, m - k), min(m, k) + 1):
        if i == 0:
            cand = b[m - 1]
        elif i == m:
            cand = a[m - 1]
        else:
            cand = np.maximum(a[i - 1], b[m - i - 1])
        np.minimum(best, cand, out=best)
    return best


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
        med, mad = np.empty(windows.shape[0]), np.empty(windows.shape[0])
        for lo in range(0, windows.shape[0], BLOCK):  # blocks that fit in cache: ~2x faster
            med[lo : lo + BLOCK], mad[lo : lo + BLOCK] = median_and_mad(windows[lo : lo + BLOCK])
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
