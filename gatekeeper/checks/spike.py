"""`spike: {window: 20, factor: 5}` — a point far from the median of the `window` points
before it, in units of their robust spread (MAD): "loss spikes", "kl_loss sudden jump".
"""

from __future__ import annotations

import math
from typing import Any, Literal

import bottleneck as bn
import numpy as np
from numpy.lib.stride_tricks import as_strided
from pydantic import Field

from gatekeeper.checks.base import MaskCheck, fmt

# MAD x 1.4826 estimates the standard deviation of normal noise, so `factor` reads as
# "this many sigmas" while one outlier inside the window cannot inflate it.
MAD_TO_SIGMA = 1.4826
BLOCK = 4096
# Up to this many points to judge, each gets its exact window without a bound first:
# below ~300 points the bound costs more than the windows it spares (measured).
EXACT_ONLY = 256
# Windows bounded at a time: 16,000 floats (125 kB) an array, under malloc's 128 kB mmap
# threshold and within the cache.
CHUNK = 16_000
# Slack of the pre-filter, relative to the largest |value|: the float error of every
# quantity it bounds is a few ulps of that (~1e-16), so 1e-12 keeps it strictly safe.
SLACK = 1e-12
# Beyond this, differences of values could overflow and the bounds would mean nothing.
HUGE = 1e300
# Far above the subnormal range (2^-1022): t and the products made of it stay normal
# floats, each rounded within 2^-53 (see _bound); deviations are lifted to LIFT.
TINY = 2.0**-990
LIFT = 2.0**-980


def _huge_shift(values: np.ndarray) -> int:
    """0, or the power of two that brings (finite) values beyond HUGE below 2^990: near
    1e308 the median of an even window (a + b) / 2 and the deviations overflowed, Inf > Inf
    is false, and a spike to -1.7e308 after 1.7e308s passed. Scaling by a power of two is
    exact (and min_scale is scaled alike), so the verdicts are those without overflow."""
    top = max(float(values.max()), -float(values.min()))
    return math.frexp(top)[1] - 990 if HUGE < top < math.inf else 0


def median_and_mad(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and MAD of each row, as np.median gives them (for an even window the mean
    of the two middle values): one sort of the rows, one of their distances to the
    median. Vectorized over rows: a live poll's few windows cost a handful of calls."""
    ordered = np.sort(windows, axis=1)
    med = _middle(ordered)
    dist = np.abs(ordered - med[:, None])
    dist.sort(axis=1)
    return med, _middle(dist)


def _middle(ordered: np.ndarray) -> np.ndarray:
    """The median of each row of row-sorted `ordered`."""
    w = ordered.shape[1]
    k = w // 2
    return ordered[:, k] if w % 2 else 0.5 * (ordered[:, k - 1] + ordered[:, k])


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
        shift = _huge_shift(values[first - w :])
        if shift:  # the same verdicts on the values scaled down by 2^shift, exactly
            scaled = self.model_copy(update={"min_scale": math.ldexp(self.min_scale, -shift)})
            return scaled.violations(np.ldexp(values, -shift), n_context)
        points = values[first:]
        # The exact median/MAD only where the bound cannot clear a point: on ordinary noise
        # that is almost none of them. A live poll's few points go straight to it: the
        # bound's fixed cost (~25 numpy calls) is more than their exact windows'.
        maybe = self._may_violate(values[first - w :]) if points.size > EXACT_ONLY else None
        rows = np.arange(points.size) if maybe is None else maybe.nonzero()[0]
        if not rows.size:
            return out
        before = values[first - w : values.size - 1]  # row j: the w points before first + j
        for lo in range(0, rows.size, BLOCK):  # blocks that fit in cache: ~2x faster
            sel = rows[lo : lo + BLOCK]
            # those rows' windows, copied: a view's fancy index pays ~30 us of Python checks
            med, mad = median_and_mad(before[sel[:, None] + np.arange(w)])
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
        does not violate (None: no bound; a direct caller's stand-in for the exact path).
        Bounded CHUNK windows at a time (`_bound`): each array a chunk makes stays in cache
        and below malloc's mmap threshold, so no step faults in fresh pages (measured on
        100,000 points: ~1,100 page faults a call when bounded whole)."""
        w = self.window
        n = part.size - w
        maybe = np.empty(max(n, 0), dtype=bool)
        block = max(16, w // 2)  # windows per band (see _block_clear)
        step = max(block, CHUNK // block * block)  # whole blocks: only the last is partial
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            self._bound(part[lo : hi + w], maybe[lo:hi], block)
        return maybe

    def _bound(self, part: np.ndarray, maybe: np.ndarray, block: int) -> None:
        """Fill `maybe`, one per point after the first w of `part`: False where the point
        certainly does not violate. Non-finite or huge values: True throughout (the
        exact path decides).

        The window's median M comes from one moving median (bottleneck, in C). A point
        with deviation d from it is cleared once its window's MAD is known to be >= t,
        t = d / (factor x 1.4826): that holds when at most (w - 1) // 2 of the window's
        points lie strictly within t of M (the MAD is the median of the distances, so
        more than half of them are then >= t). Counting points inside a band is cheap
        when the band is fixed for a block of consecutive windows: one comparison and a
        running count per block (`_block_clear`); the block's band is the union of its
        windows' own bands (M - t, M + t). Points the block's band cannot clear (a spike
        inflates its t) are tried once more with their own band, one window each; the
        rest go to the exact path.

        Rounding: the median and distances the exact path computes differ from these by
        a few ulps of the largest |value| of `part`; every band is widened and every
        deviation raised by SLACK x that (10^4 times more). t is the raised deviation
        times (1 + 1e-9) / (factor x 1.4826), computed in floats: while every product
        stays a normal float (t and the deviation are lifted to >= 2^-980 first; factors
        within ~1e+-298) each rounding loses < 2^-53, so the exact path's threshold for a
        MAD >= t, factor x max(1.4826 x MAD, min_scale) rounded as it rounds, is still >=
        the deviation: no point needs that comparison. Beyond that range of factors the
        comparison is made for every cleared point.
        """
        big = max(float(part.max()), -float(part.min()))  # max |value|, no |part| copy
        if not math.isfinite(big) or big > HUGE:  # a float: not np.isfinite's ufunc call
            maybe[:] = True
            return
        w = self.window
        before = part[:-1]  # the points of every window
        med = bn.move_median(before, w)[w - 1 :]  # median of the w points before each point
        slack = SLACK * big
        need = self._deviation(part[w:], med)
        need += slack  # in place: one array fewer to allocate
        floor = self.factor * self.min_scale
        np.greater(need, floor, out=maybe)  # the rest is cleared by min_scale alone
        # the MAD that clears each point, a hair above it
        c = (1 + 1e-9) / (self.factor * MAD_TO_SIGMA)
        enough: np.ndarray | None = None  # where a MAD >= t clears the point
        with np.errstate(over="ignore"):  # t = inf: a band that clears nothing
            if TINY <= c <= 1 / TINY:
                # lifted (cleared points, need <= 0, get a band of width ~0), t in place
                t = np.maximum(need, LIFT * max(1.0, 1.0 / c), out=need)
                t *= c
            else:
                t = np.multiply(need, c)
                np.maximum(t, 0.0, out=t)  # cleared already (need <= 0): no band width
                enough = self._cleared(need, t)
        if floor > 0.0 and not maybe.all():
            t[~maybe] = 0.0  # cleared by min_scale: no width for the band either
        # 1. one band per block of windows: the union of their bands, widened by slack
        self._block_clear(maybe, before, med, t, enough, block, slack)
        # 2. what is left, each with its own band
        rows = maybe.nonzero()[0]
        if rows.size:
            # the windows of those rows, copied (as sliding_window_view(before, w)[rows]
            # copies them, without its ~15 us of Python checks on a live poll's 10 points)
            windows = before[rows[:, None] + np.arange(w)]
            m, tr = med[rows], t[rows]
            lo, hi = m - tr - slack, m + tr + slack
            count = ((windows > lo[:, None]) & (windows < hi[:, None])).sum(axis=1)
            cleared = count <= (w - 1) // 2
            if enough is not None:
                cleared &= enough[rows]
            maybe[rows[cleared]] = False

    def _block_clear(
        self,
        maybe: np.ndarray,
        before: np.ndarray,
        med: np.ndarray,
        t: np.ndarray,
        enough: np.ndarray | None,
        block: int,
        slack: float,
    ) -> None:
        """Clear in `maybe` each point i (window before[i : i + w], median med[i]) that its
        block's band clears. A block of `block` consecutive points takes the band (lowest
        med - t - slack, highest med + t + slack) over its points, which holds every one
        of their bands; its windows span block + w - 1 consecutive points: one comparison
        per point of that span and a running count give every window's count inside, no
        per-window loop. The last partial block is left to the per-window band."""
        w = self.window
        nb = med.size // block
        m = nb * block
        if nb == 0:
            return
        starts = np.arange(0, m, block)
        edge = np.subtract(med[:m], t[:m])
        lo = np.minimum.reduceat(edge, starts)
        lo -= slack
        hi = np.maximum.reduceat(np.add(med[:m], t[:m], out=edge), starts)
        hi += slack
        size = block + w - 1  # points the block's windows span; row b: before[b * block:]
        step = before.strides[0]
        span = as_strided(before, (nb, size), (block * step, step), writeable=False)
        inside = span > lo[:, None]
        inside &= span < hi[:, None]
        # one running count over all rows (1-D: ~2x a row-wise cumsum); window i of row b
        # counts run[b * size + i + w] - run[b * size + i]
        run = np.empty(nb * size + 1, np.int32)
        run[0] = 0
        np.add.accumulate(inside.reshape(-1).view(np.int8), dtype=np.int32, out=run[1:])
        item = run.strides[0]
        ends = as_strided(run[w:], (nb, block), (size * item, item), writeable=False)
        begins = as_strided(run, (nb, block), (size * item, item), writeable=False)
        kept = np.subtract(ends, begins) > (w - 1) // 2
        if enough is not None:
            kept |= ~enough[:m].reshape(nb, block)
        maybe[:m] &= kept.reshape(-1)

    def _cleared(self, need: np.ndarray, mad_floor: np.ndarray) -> np.ndarray:
        """Where a deviation of `need` is no spike for any MAD >= mad_floor: the exact
        path's comparison, which only grows with the MAD."""
        return need <= self.factor * np.maximum(MAD_TO_SIGMA * mad_floor, self.min_scale)

    def explain(self, value: float) -> str:
        return f"spike x = {fmt(value)}, expected {self.describe()}"
