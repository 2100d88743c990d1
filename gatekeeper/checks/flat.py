"""`flat: {window: 50, min_std: 0.01}` — collapse: the spread (std or max-min) of the
`window` points ending at a point is below a floor: "raw_reward saturates near a single
value", "entropy falls to ~0".
"""

from __future__ import annotations

import bottleneck as bn
import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import MaskCheck
from gatekeeper.fmt import fmt

BLOCK = 4096
U = 2.0**-53  # unit roundoff of float64


def _rolling_std(values: np.ndarray, w: int) -> np.ndarray:
    """Population std of every w consecutive values, O(n) by running sums. Centering on
    the mean first keeps the sums small, so the difference of sums stays exact enough."""
    x = values - values.mean()
    c1 = np.concatenate([[0.0], np.cumsum(x)])
    c2 = np.concatenate([[0.0], np.cumsum(x * x)])
    s1, s2 = c1[w:] - c1[:-w], c2[w:] - c2[:-w]
    return np.sqrt(np.maximum(s2 / w - (s1 / w) ** 2, 0.0))


def _sub_block_variances(part: np.ndarray, w: int) -> tuple[int, np.ndarray] | None:
    """Population variance of each aligned run of h = w // 2 points of `part`: every
    window of w points holds a whole one (2h <= w + 1), and a window's variance is at
    least h / w times that of any h of its points (sum of squared deviations from the
    window's mean >= those of the subset about its own mean). None: too short to bound."""
    h = w // 2
    if h < 2 or h > 10**6 or part.size < h:
        return None
    n_sub = part.size // h
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf: that block is not skipped
        return h, part[: n_sub * h].reshape(n_sub, h).var(axis=1)


def _surely_spread(
    part: np.ndarray, w: int, sub: tuple[int, np.ndarray], floor: float
) -> np.ndarray:
    """Per block of BLOCK windows of `part` (window j = part[j : j + w]): True when every
    window of the block has a std that `_rolling_std` computes as >= floor: the sub-block
    bound, less every rounding error of both computations (bounded by the block's spread
    and size, generously), clears the floor with room. All blocks at once.

    `_rolling_std` sums n <= BLOCK + w - 1 centred values x (|x| <= m, the block's range
    plus the error of its mean): its running sums err by <= n u sum|x|^k, so the variance
    by <= ~6 n^2 u m^2 / w, plus 8 u m^2 for centring and the last operations; taken 64x
    and 8x. The sub-block variance errs by <= 4 h u of itself plus (h u a)^2 (a = max|v|).

    Every quantity is taken over a superset of what the block reads, which only loosens
    the bound: its range over its own points and all of the next ceil((w - 1) / BLOCK)
    blocks' (NaN or Inf there: False, the exact path); its least sub-block variance over
    the sub-blocks from its first window's to the next block's first.
    """
    h, var = sub
    n_win = part.size - w + 1
    nb = -(-n_win // BLOCK)
    starts = np.arange(nb) * BLOCK
    # the range of each aligned BLOCK of part, then of the blocks each span reaches
    cuts = np.arange(0, part.size, BLOCK)
    top, bottom = np.maximum.reduceat(part, cuts), np.minimum.reduceat(part, cuts)
    reach = -(-(w - 1) // BLOCK)
    pad = nb + reach - top.size
    if pad > 0:
        top = np.concatenate([top, np.full(pad, -np.inf)])
        bottom = np.concatenate([bottom, np.full(pad, np.inf)])
    hi, lo = top[:nb].copy(), bottom[:nb].copy()
    for shift in range(1, reach + 1):
        np.maximum(hi, top[shift : shift + nb], out=hi)
        np.minimum(lo, bottom[shift : shift + nb], out=lo)
    a = np.maximum(np.abs(hi), np.abs(lo))
    n = np.minimum(BLOCK + w - 1, part.size - starts).astype(np.float64)  # span sizes
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf: False below
        m = (hi - lo) + 2 * n * U * a
        err = 64 * n * n * U * m * m / w + 8 * U * m * m
        # block k's windows hold whole sub-blocks from ceil(lo / h) up to the next
        # block's first at most: the least over its partition cell and that one
        first = -(-starts // h)  # each < var.size: the first window holds sub-block first
        if h <= BLOCK:  # first is increasing: one reduction over the partition it makes
            low = np.minimum.reduceat(var, first)
            np.minimum(low[:-1], var[first[1:]], out=low[:-1])
        else:  # long sub-blocks: some blocks share their first
            last = np.append(first[1:], var.size - 1)
            low = np.array([var[f : la + 1].min() for f, la in zip(first, last, strict=True)])
        bound = (h / w) * (low * (1 - 4 * h * U - 1e-9) - 4 * (h * U * a) ** 2) - err
        return bound >= floor * floor * (1 + 1e-6)


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
        floor = self._floor()
        if self.min_std is None:  # moving max and min in C: O(n), and exact selections
            spread = bn.move_max(part, w)[w - 1 :] - bn.move_min(part, w)[w - 1 :]
            out[first - n_context :] = spread < floor
            return out
        flat = out[first - n_context :]
        sub = _sub_block_variances(part, w)
        n_blocks = -(-(part.size - w + 1) // BLOCK)
        spread = _surely_spread(part, w, sub, floor) if sub is not None else None
        # blocks where every window's std is above the floor hold no flat window
        todo = range(n_blocks) if spread is None else np.flatnonzero(~spread).tolist()
        for k in todo:
            lo = k * BLOCK
            span = part[lo : lo + BLOCK + w - 1]
            # blocks re-centred on their own mean keep running sums exact on trending series
            flat[lo : lo + BLOCK] = _rolling_std(span, w) < floor
        return out

    def explain(self, value: float) -> str:
        return (
            f"the {self.window} points ending at x = {fmt(value)} are flat: "
            f"{self._measure()} < {fmt(self._floor())}"
        )
