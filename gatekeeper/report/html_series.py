"""What a plot of one rule shows, as numbers: the series (downsampled for drawing), the
bound as lines or a band, the judged selection, the violating and non-finite points.

Shared by the HTML report, the daemon's status page and the step-summary charts, so all
three draw the same thing. Pure: a RuleResult and the metric's Series in, a Figure out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gatekeeper.model import Series
from gatekeeper.verdict import RuleResult, Status

DRAW_POINTS = 1200  # ~2 per horizontal pixel of a full-width chart


@dataclass(frozen=True)
class Line:
    """A bound drawn across the chart: constant (`y`) or following the steps (`ys`)."""

    label: str
    y: float | None = None
    steps: np.ndarray | None = None
    ys: np.ndarray | None = None


@dataclass(frozen=True)
class Figure:
    metric: str
    step_key: str
    steps: np.ndarray  # finite points to draw (downsampled), sorted by step
    values: np.ndarray
    total: int  # points in the series before downsampling
    band: tuple[float, float] | None = None  # the allowed range, when it is one
    lines: list[Line] = field(default_factory=list)
    deadline: tuple[str, int] | None = None  # (label, step) for `reach`
    span: tuple[int, int] | None = None  # judged selection
    marks: list[tuple[int, float]] = field(default_factory=list)  # violating points
    nonfinite: list[tuple[int, str]] = field(default_factory=list)  # (step, "NaN"/"Infinity")
    focus: tuple[int, float | None] | None = None  # the step the verdict reports
    zoomed: bool = False  # drawn around the judged steps only
    corridor: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # steps, lo, hi

    @property
    def empty(self) -> bool:
        return not self.steps.size and not self.nonfinite


def downsample(steps: np.ndarray, values: np.ndarray, n: int, keep: np.ndarray) -> np.ndarray:
    """Indices to draw: per bucket of ~4*size/n consecutive points, its first, min, max and
    last point (so the drawn envelope is exact) plus every index in `keep`. Sorted, unique."""
    size = steps.size
    if size <= n:
        return np.arange(size)
    buckets = max(1, n // 4)
    edges = np.linspace(0, size, buckets + 1).astype(np.int64)
    starts, ends = edges[:-1], edges[1:]
    nonempty = ends > starts
    starts, ends = starts[nonempty], ends[nonempty]
    lo = np.minimum.reduceat(values, starts)
    hi = np.maximum.reduceat(values, starts)
    # index of each bucket's min/max: first position where the value equals it
    bucket_of = np.repeat(np.arange(starts.size), ends - starts)
    pos = np.arange(size)
    is_lo = values == lo[bucket_of]
    is_hi = values == hi[bucket_of]
    first_lo = np.full(starts.size, size, np.int64)
    first_hi = np.full(starts.size, size, np.int64)
    np.minimum.at(first_lo, bucket_of[is_lo], pos[is_lo])
    np.minimum.at(first_hi, bucket_of[is_hi], pos[is_hi])
    picked = np.concatenate([starts, ends - 1, first_lo, first_hi, keep])
    return np.unique(picked[picked < size])


def _bound(check: dict | None, figure: dict) -> None:
    """Fill `band`, `lines` and `deadline` from the check's parameters."""
    if not check:
        return
    kind = check.get("kind")
    num = _num
    if kind == "max" and num(check.get("value")) is not None:
        figure["lines"].append(Line("max", y=num(check["value"])))
    elif kind == "min" and num(check.get("value")) is not None:
        figure["lines"].append(Line("min", y=num(check["value"])))
    elif kind == "abs_max" and num(check.get("value")) is not None:
        v = abs(num(check["value"]) or 0.0)
        figure["band"] = (-v, v)
    elif kind == "between":
        lo, hi = num(check.get("lo")), num(check.get("hi"))
        if lo is not None and hi is not None:
            figure["band"] = (lo, hi)
    elif kind == "approx" and num(check.get("value")) is not None:
        v = num(check["value"]) or 0.0
        tol = max((num(check.get("rel")) or 0.0) * abs(v), num(check.get("abs_")) or 0.0)
        figure["band"] = (v - tol, v + tol)
        figure["lines"].append(Line("target", y=v))
    elif kind == "reach" and num(check.get("value")) is not None:
        figure["lines"].append(Line("target", y=num(check["value"])))
        if check.get("by_step") is not None:
            figure["deadline"] = (f"by step {int(check['by_step'])}", int(check["by_step"]))
    elif kind == "fraction":
        for side in ("above", "below"):
            if num(check.get(side)) is not None:
                figure["lines"].append(Line(f"threshold ({side})", y=num(check[side])))


def _overlay(overlay: dict | None, parts: dict) -> None:
    """history: the trusted corridor (filled, edges dashed) and the reference per step."""
    if not overlay or not all(k in overlay for k in ("steps", "lo", "hi", "ref")):
        return
    steps = np.asarray(overlay["steps"], dtype=np.int64)
    lo, hi, ref = (np.asarray(overlay[k], dtype=np.float64) for k in ("lo", "hi", "ref"))
    if not steps.size or not lo.size == hi.size == ref.size == steps.size:
        return
    parts["corridor"] = (steps, lo, hi)
    parts["lines"] += [
        Line("reference (mean of trusted runs)", steps=steps, ys=ref),
        Line("corridor high", steps=steps, ys=hi),
        Line("corridor low", steps=steps, ys=lo),
    ]


def _spike_lines(
    check: dict, steps: np.ndarray, values: np.ndarray, idx: np.ndarray
) -> list[Line]:
    """Rolling median of the previous `window` points and the threshold above/below it,
    computed the way the check does (MAD-sigmas) on the finite points — only at the drawn
    indices `idx`, so a long run costs O(drawn x window), not O(points x window)."""
    from gatekeeper.checks.spike import MAD_TO_SIGMA, median_and_mad

    w = int(check.get("window") or 20)
    idx = idx[idx >= w]
    if not idx.size:
        return []
    windows = values[idx[:, None] + np.arange(-w, 0)]  # the w points before each drawn one
    med, mad = median_and_mad(windows)
    scale = np.maximum(MAD_TO_SIGMA * mad, float(check.get("min_scale") or 0.0))
    k = float(check.get("factor") or 5.0)
    at = steps[idx]
    out = [Line("rolling median", steps=at, ys=med)]
    direction = check.get("direction") or "up"
    if direction in ("up", "both"):
        out.append(Line("threshold", steps=at, ys=med + k * scale))
    if direction in ("down", "both"):
        out.append(Line("threshold (down)", steps=at, ys=med - k * scale))
    return out


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def figure(result: RuleResult, series: Series | None, points: int = DRAW_POINTS) -> Figure:
    """The figure for one rule; an empty one when the run has no series for its metric."""
    parts: dict = {"lines": [], "band": None, "deadline": None, "corridor": None}
    _bound(result.check, parts)
    _overlay(result.overlay, parts)
    # the reported step is marked only where it is a finding (a pass reports its last step)
    finding = result.status in (Status.FAIL, Status.WARN, Status.ERROR)
    focus = (result.step, result.value) if finding and result.step is not None else None
    if series is None or not len(series):
        empty = np.empty(0)
        return Figure(result.metric, result.step_key or "step", empty, empty, 0,
                      span=result.span, focus=focus, **parts)
    total = len(series)
    series, zoomed = _zoom(series, result.span)
    bad = ~np.isfinite(series.values)
    nonfinite = [
        (int(s), "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity"))
        for s, v in zip(series.steps[bad][:1000], series.values[bad][:1000], strict=True)
    ]
    steps, values = series.steps[~bad], series.values[~bad]
    marked = np.asarray(result.violating_steps, dtype=np.int64)
    if result.status in (Status.FAIL, Status.WARN) and result.step is not None:
        marked = np.append(marked, result.step)
    keep = np.flatnonzero(np.isin(steps, marked)) if marked.size else np.empty(0, np.int64)
    idx = downsample(steps, values, points, keep)
    marks = [(int(steps[i]), float(values[i])) for i in keep]
    if result.check and result.check.get("kind") == "spike":
        parts["lines"].extend(_spike_lines(result.check, steps, values, idx))
    return Figure(
        result.metric,
        series.step_key,
        steps[idx],
        values[idx],
        total,
        zoomed=zoomed,
        span=result.span,
        marks=marks,
        nonfinite=nonfinite,
        focus=focus,
        **parts,
    )


ZOOM_BELOW = 0.05  # a judged span under 5% of the run is drawn zoomed in


def _zoom(series: Series, span: tuple[int, int] | None) -> tuple[Series, bool]:
    """A rule that judges a few steps (`steps: [0]`) of a long run is drawn around them,
    with context on either side; otherwise its point would sit on the axis."""
    if span is None or len(series) < 2:
        return series, False
    first, last = int(series.steps[0]), int(series.steps[-1])
    width = span[1] - span[0]
    if (width + 1) >= ZOOM_BELOW * (last - first + 1):
        return series, False
    pad = max(10, 2 * width, int(0.01 * (last - first)))
    keep = (series.steps >= span[0] - pad) & (series.steps <= span[1] + pad)
    return Series(series.metric, series.steps[keep], series.values[keep], series.step_key), True


def series_for(result: RuleResult, run_series: dict[str, Series]) -> Series | None:
    """The rule's metric in the run; a derived (expr) metric is evaluated from its inputs."""
    found = run_series.get(result.metric)
    if found is not None:
        return found
    from gatekeeper.expr import Aligner, ExprError, parse_expr

    try:
        expr = parse_expr(result.metric)
    except ExprError:  # not an expression: the metric is simply absent from the run
        return None
    if not all(m in run_series for m in expr.metrics):
        return None
    out = Aligner(expr).feed(run_series)
    if out is None:
        return None
    return Series(result.metric, out[0], out[1], result.step_key or "step")
