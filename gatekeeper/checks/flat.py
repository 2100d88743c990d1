"""`flat: {window: 50, min_std: 0.01}` — collapse: the spread (std or max-min) of the
`window` points ending at a point is below a floor: "raw_reward saturates near a single
value", "entropy falls to ~0".
"""

from __future__ import annotations

import bottleneck as bn
import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import MaskCheck, window_sums
from gatekeeper.fmt import fmt

BLOCK = 4096
U = 2.0**-53  # unit roundoff of float64


def _window_std(values: np.ndarray, w: int, first: int) -> np.ndarray:
    """Population std of every w consecutive values (n - w + 1 of them), `values[0]` being
    point number `first` of the rule's points. Each window is summed from its own points
    (`window_sums`: the suffix of one w-block plus the prefix of the next, blocks aligned
    to the point numbers), both parts centred on the last point of the first block, a
    point of every window that starts in it. So a window's std is the same float whatever
    the polls its points came in, and its sums see only the window's range. O(n)."""
    n, lead = values.size, first % w
    ends = np.arange(w - 1 - lead, n + w - 1, w)  # each block's last point
    centre = values[np.minimum(ends, n - 1)]  # past the end: a block no window starts in
    # w copies of each block's centre, after w of block 0's (the block before block 0:
    # no window reads it): a point's own centre is w on from its place, the block
    # before's at its place
    each = np.repeat(np.concatenate([centre[:1], centre]), w)
    with np.errstate(over="ignore", invalid="ignore"):  # huge points: Inf/NaN, not flat
        d = np.empty((2, 2, n))  # [own, next] x [x, x^2]
        np.subtract(values, each[w + lead : w + lead + n], out=d[0, 0])
        np.subtract(values, each[lead : lead + n], out=d[1, 0])
        np.multiply(d[:, 0], d[:, 0], out=d[:, 1])
        s1, s2 = window_sums(d[0], w, first, tails=d[1])
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
    window of the block has a std that `_window_std` computes as >= floor: the sub-block
    bound, less every rounding error of both computations (bounded by the block's spread
    and size, generously), clears the floor with room. All blocks at once.

    `_window_std` sums w values x centred on a point of the window (|x| <= m, the block's
    range): its sums err by <= w u sum|x|^k, so the variance by <= ~3 w u m^2, plus a few
    u m^2 for centring and the last operations. The bound takes 64 n^2 u m^2 / w (n =
    BLOCK + w - 1 >= w) and 8 u m^2: it was made for running sums over the whole span, and
    holds for sums over one window with room. The sub-block variance errs by <= 4 h u of
    itself plus (h u a)^2 (a = max|v|).

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

    numbered = True  # windows summed from their own points: the same std in every poll

    def violations(self, values: np.ndarray, n_context: int, first: int = 0) -> np.ndarray:
        out = np.zeros(values.size - n_context, dtype=bool)
        w = self.window
        end = max(n_context, w - 1)  # the first point that ends a full window
        if end >= values.size:
            return out
        part = values[end - w + 1 :]  # part[0] is point number first + end - w + 1
        floor = self._floor()
        if self.min_std is None:  # moving max and min in C: O(n), and exact selections
            spread = bn.move_max(part, w)[w - 1 :] - bn.move_min(part, w)[w - 1 :]
            out[end - n_context :] = spread < floor
            return out
        flat = out[end - n_context :]
        n_blocks = -(-(part.size - w + 1) // BLOCK)
        # one block (a poll): computing it costs less than the bound that could skip it
        sub = _sub_block_variances(part, w) if n_blocks > 1 else None
        spread = _surely_spread(part, w, sub, floor) if sub is not None else None
        # blocks where every window's std is above the floor hold no flat window
        todo = range(n_blocks) if spread is None else np.flatnonzero(~spread).tolist()
        for k in todo:
            lo = k * BLOCK
            span = part[lo : lo + BLOCK + w - 1]
            flat[lo : lo + BLOCK] = _window_std(span, w, first + end - w + 1 + lo) < floor
        return out

    def explain(self, value: float) -> str:
        return (
            f"the {self.window} points ending at x = {fmt(value)} are flat: "
            f"{self._measure()} < {fmt(self._floor())}"
        )
