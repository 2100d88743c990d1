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

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
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


EXACT = 2**53  # float64 holds every integer up to this exactly
INT64_MAX = 2**63 - 1  # int64 differences of steps wider apart than this wrap around


def _window_sums(a: np.ndarray, w: int, run: np.ndarray | None = None) -> np.ndarray:
    """Sum of every w consecutive values: differences of one running sum from 0. `run`:
    a buffer of a.size + 1 floats for the running sum (`a` may be its own tail)."""
    c = np.empty(a.size + 1) if run is None else run
    c[0] = 0.0
    a.cumsum(out=c[1:])
    return np.subtract(c[w:], c[:-w])


def _overflow_shift(steps: np.ndarray, values: np.ndarray, w: int) -> int:
    """0, or the power of two to scale (finite) values down by so that no sum of the fit
    overflows: with values near 1e308 the window sums were Inf, Inf - Inf a NaN slope, and
    a NaN passes every bound (a rising 1e307 passed `max_slope: 0`). Scaling by a power
    of two is exact, so the slope scaled back is the very float the fit would give
    without overflow (and the growth, a ratio, is unchanged); the usual values skip it."""
    top = max(float(values.max()), -float(values.min()))
    if top < 2.0**800:  # sums of n * w * span * top stay below 2^1023 (each < 2^50)
        return 0
    span = max(1, int(steps.max()) - int(steps.min()))
    room = 1000 - values.size.bit_length() - w.bit_length() - span.bit_length()
    return max(0, math.frexp(top)[1] - room)


def rolling_fit(
    steps: np.ndarray, values: np.ndarray, w: int, *, growth: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and growth of each run of w consecutive points (len - w + 1);
    growth=False computes the growth of the last run only (a 1-element array).

    Window sums are differences of running sums. The step sums are integers: on
    contiguous steps (the usual) and while every running sum stays below 2^53 they are
    exact, so the denominator w*Sxx - Sx^2 is the same integer w^2 (w^2 - 1) / 12 for
    every window and Sx a closed form: no running sums of the steps are taken, and the
    result is the very float the general formula gives (tests/checks/test_trend_reference.py).
    Each elementwise step is the formula's own, in the same order, written into arrays
    already made (one running-sum buffer for both sums): on 100,000 points every fresh
    array is another 800 kB to allocate and fault in.
    """
    n = values.size
    shift = _overflow_shift(steps, values, w)
    if shift:  # the same fit of the values scaled down by 2^shift, exactly, then back
        slope, grow = rolling_fit(steps, np.ldexp(values, -shift), w, growth=growth)
        with np.errstate(over="ignore"):  # a slope past 1.8e308 a step is Inf: it fails
            return np.ldexp(slope, shift), grow  # growth is a ratio: the same scaled
    y = values
    exact = (
        int(steps[-1]) - int(steps[0]) == n - 1
        and (n - 1) * n * (2 * n - 1) // 6 <= EXACT  # the largest running sum of x^2
        and (w * (n - 1)) ** 2 <= EXACT  # w * Sxx and Sx^2 of the last window
    )
    run = np.empty(n + 1)
    sy = _window_sums(y, w, run)
    contiguous = exact and not np.count_nonzero(steps[1:] - steps[:-1] != 1)  # np.diff
    # x: the steps from the first, as floats (exact: below 2^53 whenever contiguous)
    if contiguous:
        x = np.arange(n, dtype=np.float64)
    elif int(steps.max()) - int(steps.min()) <= INT64_MAX:  # no difference can wrap
        x = (steps - steps[0]).astype(np.float64)
    else:  # steps spanning more than int64 (-2^63 .. 2^63-1): from floats, never wrapped
        x = steps.astype(np.float64) - float(steps[0])
    sxy = _window_sums(np.multiply(x, y, out=run[1:]), w, run)  # x * y, summed in place
    if contiguous:
        sx = x[: n - w + 1]  # 0, 1, ...: arange(0.0, n - w + 1), then the closed form
        np.multiply(sx, w, out=sx)
        np.add(sx, w * (w - 1) // 2, out=sx)
        slope = np.multiply(sxy, w, out=sxy)  # (w * Sxy - Sx * Sy) / the one denominator
        np.subtract(slope, np.multiply(sx, sy, out=sx), out=slope)
        np.divide(slope, float(w * w * (w * w - 1) // 12), out=slope)
        span: np.ndarray | float = float(w - 1)
    else:
        sx, sxx = _window_sums(x, w), _window_sums(x * x, w)
        denom = w * sxx - sx * sx
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(denom > 0, (w * sxy - sx * sy) / denom, 0.0)
        span = x[w - 1 :] - x[: n - w + 1]
    fitted = slope
    if not growth:  # the last window's only, by the same elementwise formula
        sy, fitted = sy[-1:], slope[-1:]
        span = span if isinstance(span, float) else span[-1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.divide(sy, w, out=sy if growth else None)  # sy is not needed after
        grow = np.multiply(fitted, span)
        np.divide(grow, np.abs(mean), out=grow)
        grow[mean == 0] = 0.0  # np.where(mean != 0, fitted * span / |mean|, 0.0)
    return slope, grow


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
        slope, growth = rolling_fit(js, jv, w, growth=by_growth)
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
