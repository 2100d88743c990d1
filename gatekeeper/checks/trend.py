"""`trend: {window: 50, max_slope: 1e-4}` — the least-squares slope (per step) of every
`window` consecutive points stays within bounds, or their relative growth does:
"train_rollout_logprob_abs_diff climbing without bound".

Growth is the fitted change across the window relative to the window's mean level:
slope * (last step - first step) / |mean|. Slopes use the metric's own steps, so step
gaps are measured as gaps, not as neighbouring points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome, window_sums
from gatekeeper.fmt import fmt, plural
from gatekeeper.verdict import Status


@dataclass
class _TrendState:
    tail_steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    tail_values: np.ndarray = field(default_factory=lambda: np.empty(0))
    points: int = 0
    windows: int = 0
    violations: int = 0
    first_bad: tuple[int, float, str] | None = None  # end step, measure, why
    last: tuple[int, float, float] | None = None  # end step, slope, growth
    origin: tuple[int, float] | None = None  # the first point: what x and y are taken from


INT64_MAX = 2**63 - 1  # int64 differences of steps wider apart than this wrap around
# Windows fitted at a time: their four sums stay within the cache (a run of 10M points
# is not four 80 MB arrays and their copies at once).
PIECE = 16_384


def _overflow_shift(x_top: int, values: np.ndarray, ref: float, w: int) -> int:
    """0, or the power of two to scale (finite) values down by so that no sum of the fit
    overflows: with values near 1e308 the window sums were Inf, Inf - Inf a NaN slope, and
    a NaN passes every bound (a rising 1e307 passed `max_slope: 0`). Scaling by a power
    of two is exact, so the slope scaled back is the very float the fit would give
    without overflow (and the growth, a ratio, is unchanged); the usual values skip it.
    `x_top`: the largest step offset from the origin."""
    top = max(float(values.max()), -float(values.min()), abs(ref))
    if top < 2.0**800:  # w^2 * x * 2 top stays below 2^1023 (x < 2^64, w < 2^60)
        return 0
    room = 1000 - 2 * w.bit_length() - max(1, x_top).bit_length()
    return max(0, math.frexp(top)[1] - room)


def rolling_fit(
    steps: np.ndarray,
    values: np.ndarray,
    w: int,
    *,
    first: int = 0,
    origin: tuple[int, float] | None = None,
    growth: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and growth of each run of w consecutive points (len - w + 1);
    growth=False computes the growth of the last run only (a 1-element array).

    `values[0]` is point number `first` of the rule's points and `origin` its first point
    (step, value; default: this array's first): x is the step less the origin's, y the
    value less the origin's, and every window sum is summed from the window's own points
    (`window_sums`, blocks aligned to the point numbers). So a window's slope is the same
    float whatever the chunks the points come in -- a live poll's fit is `check`'s -- and
    a metric that stands at its first value has slope 0, not the noise of running sums.
    """
    origin = (int(steps[0]), float(values[0])) if origin is None else origin
    step0, ref = origin
    x_top = int(steps[-1]) - step0  # sorted: the largest offset
    shift = _overflow_shift(x_top, values, ref, w)
    if shift:  # the same fit of the values scaled down by 2^shift, exactly, then back
        scaled = (step0, math.ldexp(ref, -shift))
        slope, grow = rolling_fit(steps, np.ldexp(values, -shift), w, first=first,
                                  origin=scaled, growth=growth)
        with np.errstate(over="ignore"):  # a slope past 1.8e308 a step is Inf: it fails
            return np.ldexp(slope, shift), grow  # growth is a ratio: the same scaled
    if x_top <= INT64_MAX:  # no offset wraps in int64
        x = (steps - step0).astype(np.float64)
    else:  # steps spanning more than int64 (-2^63 .. 2^63-1): from floats, never wrapped
        x = steps.astype(np.float64) - float(step0)
    y = values - ref
    m = x.size - w + 1  # windows; fitted PIECE at a time (the same floats, less memory)
    if m <= PIECE:  # a live poll's, or a short run's
        slope, sy = _fit(x, y, w, first)
    else:
        parts = [_fit(x[lo : lo + PIECE + w - 1], y[lo : lo + PIECE + w - 1], w, first + lo)
                 for lo in range(0, m, PIECE)]
        slope = np.concatenate([part[0] for part in parts])
        sy = np.concatenate([part[1] for part in parts])
    with np.errstate(divide="ignore", invalid="ignore"):
        span = x[w - 1 :] - x[:m]
        if not growth:  # the last window's only, by the same elementwise formula
            sy, span, fitted = sy[-1:], span[-1:], slope[-1:]
        else:
            fitted = slope
        mean = ref + sy / w
        grow = np.where(mean != 0, fitted * span / np.abs(mean), 0.0)
    return slope, grow


def _fit(x: np.ndarray, y: np.ndarray, w: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """The slope and the sum of y of every window of x and y (x[0]: point number `first`)."""
    sx, sxx, sy, sxy = window_sums(np.stack([x, x * x, y, x * y]), w, first)
    denom = w * sxx - sx * sx
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, (w * sxy - sx * sy) / denom, 0.0), sy


class Trend(AggregateCheck):
    kind = "trend"
    context_fields = ()
    window: int = Field(ge=3)
    max_slope: float | None = None
    min_slope: float | None = None
    max_growth: float | None = None
    min_growth: float | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> Trend:
        if all(
            b is None for b in (self.max_slope, self.min_slope, self.max_growth, self.min_growth)
        ):
            raise ValueError("trend needs a bound: max_slope, min_slope, max_growth or min_growth")
        for lo, hi, name in (
            (self.min_slope, self.max_slope, "slope"),
            (self.min_growth, self.max_growth, "growth"),
        ):
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"min_{name} ({fmt(lo)}) must be <= max_{name} ({fmt(hi)})")
        return self

    def describe(self) -> str:
        parts = []
        for name, lo, hi in (
            ("slope/step", self.min_slope, self.max_slope),
            ("growth", self.min_growth, self.max_growth),
        ):
            if lo is not None and hi is not None:
                parts.append(f"{fmt(lo)} <= {name} <= {fmt(hi)}")
            elif hi is not None:
                parts.append(f"{name} <= {fmt(hi)}")
            elif lo is not None:
                parts.append(f"{name} >= {fmt(lo)}")
        return f"{', '.join(parts)} over every {self.window} points"

    def start(self) -> _TrendState:
        return _TrendState()

    def feed(self, state: _TrendState, steps: np.ndarray, values: np.ndarray) -> _TrendState:
        if not values.size:
            return state
        if state.origin is None:
            state.origin = (int(steps[0]), float(values[0]))
        first = state.points - state.tail_values.size  # the point number of the join's first
        state.points += int(values.size)
        if state.tail_values.size or steps.dtype != np.int64 or values.dtype != np.float64:
            js = np.concatenate([state.tail_steps, steps])
            jv = np.concatenate([state.tail_values, values])
        else:  # the first feed (or a whole run at once): the same arrays, no copy
            js, jv = steps, values
        w = self.window
        # copies: a few points, not views that keep (or share) the whole chunk
        state.tail_steps, state.tail_values = js[-(w - 1) :].copy(), jv[-(w - 1) :].copy()
        if jv.size < w:
            return state
        by_growth = self.max_growth is not None or self.min_growth is not None
        slope, growth = rolling_fit(js, jv, w, first=first, origin=state.origin, growth=by_growth)
        ends = js[w - 1 :]
        tests = [
            (label, arr, op, bound)
            for label, arr, op, bound in (
                ("slope", slope, np.greater, self.max_slope),
                ("slope", slope, np.less, self.min_slope),
                ("growth", growth, np.greater, self.max_growth),
                ("growth", growth, np.less, self.min_growth),
            )
            if bound is not None
        ]
        bad = tests[0][2](tests[0][1], tests[0][3])
        for _, arr, op, bound in tests[1:]:
            bad |= op(arr, bound)
        state.windows += int(slope.size)
        n_bad = int(np.count_nonzero(bad))
        state.violations += n_bad
        if state.first_bad is None and n_bad:
            i = int(np.argmax(bad))
            # the first bound in the order above that the window breaks names it
            label = next(lbl for lbl, arr, op, bound in tests if op(arr[i], bound))
            state.first_bad = (
                int(ends[i]),
                float(slope[i] if label == "slope" else growth[i]),
                label,
            )
        state.last = (int(ends[-1]), float(slope[-1]), float(growth[-1]))
        return state

    def outcome(self, state: _TrendState, *, final: bool, ctx: EvalContext) -> Outcome:
        if state.windows == 0:
            return Outcome(
                Status.ERROR if final else Status.PENDING,
                f"needs {self.window} points for its window, has {state.points}",
            )
        if state.first_bad is not None:
            step, measure, label = state.first_bad
            unit = "/step" if label == "slope" else ""
            return Outcome(
                Status.FAIL,
                f"{label} {fmt(measure)}{unit} over the {self.window} points ending at step "
                f"{step}, expected {self.describe()} ({state.violations} of {state.windows} "
                "windows violate)",
                step=step,
                value=measure,
                violations=state.violations,
                judged=state.windows,
            )
        assert state.last is not None
        step, slope, growth = state.last
        return Outcome(
            Status.PASS,
            f"{plural(state.windows, 'window')} within {self.describe()}; "
            f"last slope {fmt(slope)}/step, "
            f"growth {fmt(growth)} at step {step}",
            step=step,
            value=slope,
            judged=state.windows,
        )
