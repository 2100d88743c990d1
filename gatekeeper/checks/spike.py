"""`spike: {window: 20, factor: 5}` — a point far from the median of the `window` points
before it, in units of their robust spread (MAD): "loss spikes", "kl_loss sudden jump".
"""

from __future__ import annotations

from typing import Any, Literal

import bottleneck as bn
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field

from gatekeeper.checks.base import MaskCheck, fmt

# MAD x 1.4826 estimates the standard deviation of normal noise, so `factor` reads as
# "this many sigmas" while one outlier inside the window cannot inflate it.
MAD_TO_SIGMA = 1.4826
BLOCK = 4096
# Slack of the pre-filter, relative to the largest |value|: the float error of every
# quantity it bounds is a few ulps of that (~1e-16), so 1e-12 keeps it strictly safe.
SLACK = 1e-12
# Beyond this, differences of values could overflow and the bounds would mean nothing.
HUGE = 1e300


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
        points = values[first:]
        maybe = self._may_violate(values[first - w :])
        rows = np.arange(points.size) if maybe is None else np.flatnonzero(maybe)
        # The exact median/MAD (one sort per window) only where the bound cannot clear a
        # point: on ordinary noise that is almost none of them.
        for lo in range(0, rows.size, BLOCK):  # blocks that fit in cache: ~2x faster
            sel = rows[lo : lo + BLOCK]
            med, mad = median_and_mad(windows[sel])
            out[first - n_context + sel] = self._exceeds(points[sel], med, mad)
        return out

    def _exceeds(self, x: np.ndarray, med: np.ndarray, mad: np.ndarray) -> np.ndarray:
        scale = np.maximum(MAD_TO_SIGMA * mad, self.min_scale)
        return self._deviation(x, med) > self.factor * scale

    def _deviation(self, x: np.ndarray, med: np.ndarray) -> np.ndarray:
        dev = x - med
        if self.direction == "down":
            return -dev
        if self.direction == "both":
            return np.abs(dev)
        return dev

    def _may_violate(self, part: np.ndarray) -> np.ndarray | None:
        """For each point after the first w of `part`: False where the point certainly
        does not violate, by a lower bound on its window's MAD computed in O(n log w)
        (bottleneck's moving median/max/min); None: no bound (non-finite or huge values).

        The bound: with R_j the median of the w points ending at j and M the window's
        median, |x_j - M| >= |x_j - R_j| - |R_j - M|, so (medians being monotone)
        MAD >= median_j |x_j - R_j| - max_j |R_j - M|. Both terms are moving statistics.
        """
        big = float(np.max(np.abs(part)))
        if not np.isfinite(big) or big > HUGE:
            return None
        w = self.window
        r = bn.move_median(part, w)
        r[: w - 1] = part[: w - 1]  # any finite centre keeps the bound valid
        med = r[w - 1 : -1]  # median of the window before each point
        spread = bn.move_median(np.abs(part - r), w)[w - 1 : -1]
        drift = np.maximum(bn.move_max(r, w)[w - 1 : -1] - med, med - bn.move_min(r, w)[w - 1 : -1])
        slack = SLACK * big
        low = np.maximum(spread - drift - slack, 0.0)
        bound = self.factor * np.maximum(MAD_TO_SIGMA * low, self.min_scale)
        return self._deviation(part[w:], med) + slack * (1.0 + self.factor) > bound

    def explain(self, value: float) -> str:
        return f"spike x = {fmt(value)}, expected {self.describe()}"
