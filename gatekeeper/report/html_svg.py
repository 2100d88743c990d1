"""One rule's Figure as an inline SVG chart: written by Python, no JS, no fonts to load.

The chart carries its axis mapping as data attributes (`data-x0`/`data-x1` steps onto
`data-px0`/`data-px1` pixels) and every marker its step, so a reader — or a test — can
check through the DOM that a violation marker sits at the step the verdict reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

import numpy as np

from gatekeeper.fmt import fmt
from gatekeeper.report.html_series import Figure, Line

W, H = 800, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 10, 26


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _domain(fig: Figure) -> tuple[float, float, float, float]:
    xs = [float(fig.steps[0]), float(fig.steps[-1])] if fig.steps.size else []
    xs += [s for s, _ in fig.nonfinite]
    if fig.span:
        xs += list(fig.span)
    if fig.deadline:
        xs.append(fig.deadline[1])
    ys = [float(fig.values.min()), float(fig.values.max())] if fig.values.size else []
    for line in fig.lines:
        if line.y is not None:
            ys.append(line.y)
        elif line.ys is not None and line.ys.size:
            ys += [float(np.min(line.ys)), float(np.max(line.ys))]
    if fig.band:
        ys += [v for v in fig.band if math.isfinite(v)]
    if fig.corridor is not None:
        xs += [float(fig.corridor[0][0]), float(fig.corridor[0][-1])]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 <= y0:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    pad = (y1 - y0) * 0.06
    return x0, x1, y0 - pad, y1 + pad


def _points(xs: np.ndarray, ys: np.ndarray, sx: Callable, sy: Callable) -> str:
    px = np.round(sx(xs.astype(np.float64)), 1)
    py = np.round(sy(ys.astype(np.float64)), 1)
    return " ".join(f"{a:g},{b:g}" for a, b in zip(px.tolist(), py.tolist(), strict=True))


def svg(fig: Figure, *, width: int = W, height: int = H, axes: bool = True) -> str:
    """The chart as an `<svg>` element (escaped; safe to inline in HTML)."""
    left, bottom = (LEFT, BOTTOM) if axes else (2, 2)
    right, top = (RIGHT, TOP) if axes else (2, 2)
    x0, x1, y0, y1 = _domain(fig)
    px0, px1, py0, py1 = left, width - right, height - bottom, top

    def sx(x: np.ndarray | float) -> np.ndarray | float:
        return px0 + (np.asarray(x) - x0) * (px1 - px0) / (x1 - x0)

    def sy(y: np.ndarray | float) -> np.ndarray | float:
        return py0 + (np.asarray(y) - y0) * (py1 - py0) / (y1 - y0)

    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" '
        f'preserveAspectRatio="none" role="img" data-x0="{x0:g}" data-x1="{x1:g}" '
        f'data-px0="{px0}" data-px1="{px1}" data-width="{width}" '
        f'aria-label="{escape(fig.metric)} over {escape(fig.step_key)}">'
    ]
    if fig.span:
        a, b = float(sx(fig.span[0])), float(sx(fig.span[1]))
        out.append(
            f'<rect class="span" x="{a:.1f}" y="{py1}" width="{max(b - a, 1.5):.1f}" '
            f'height="{py0 - py1}"><title>judged: {escape(fig.step_key)} '
            f"{fig.span[0]}..{fig.span[1]}</title></rect>"
        )
    if fig.band:
        top_y = float(sy(min(fig.band[1], y1)))
        bot_y = float(sy(max(fig.band[0], y0)))
        out.append(
            f'<rect class="band" x="{px0}" y="{top_y:.1f}" width="{px1 - px0}" '
            f'height="{max(bot_y - top_y, 1):.1f}"><title>allowed: '
            f"{fmt(fig.band[0])} .. {fmt(fig.band[1])}</title></rect>"
        )
    if fig.corridor is not None:
        cs, lo, hi = fig.corridor
        upper = _points(cs, hi, sx, sy)
        lower = _points(cs[::-1], lo[::-1], sx, sy)
        out.append(f'<polygon class="band corridor" points="{upper} {lower}">'
                   "<title>trusted corridor</title></polygon>")
    if axes:
        out.append(_axes(fig, x0, x1, y0, y1, sx, sy, (px0, px1, py0, py1)))
    for line in fig.lines:
        out.append(_bound_line(line, sx, sy, px0, px1))
    if fig.deadline:
        x = float(sx(fig.deadline[1]))
        out.append(
            f'<line class="deadline" x1="{x:.1f}" x2="{x:.1f}" y1="{py1}" y2="{py0}">'
            f"<title>{escape(fig.deadline[0])}</title></line>"
        )
    if fig.steps.size:
        out.append(f'<polyline class="series" points="{_points(fig.steps, fig.values, sx, sy)}"/>')
    for step, value in fig.marks:
        out.append(
            f'<circle class="mark" data-step="{step}" cx="{float(sx(step)):.1f}" '
            f'cy="{float(sy(value)):.1f}" r="3.5"><title>{escape(fig.step_key)} {step}: '
            f"{fmt(value)} violates</title></circle>"
        )
    for step, kind in fig.nonfinite:
        x = float(sx(step))
        out.append(
            f'<path class="nonfinite" data-step="{step}" d="M{x - 5:.1f},{py1 + 1} '
            f'L{x + 5:.1f},{py1 + 1} L{x:.1f},{py1 + 9} Z"><title>{escape(fig.step_key)} '
            f"{step}: {kind}</title></path>"
        )
    if fig.focus is not None:
        x = float(sx(fig.focus[0]))
        out.append(
            f'<line class="focus" data-step="{fig.focus[0]}" x1="{x:.1f}" x2="{x:.1f}" '
            f'y1="{py1}" y2="{py0}"><title>reported: {escape(fig.step_key)} {fig.focus[0]}'
            f"</title></line>"
        )
    out.append("</svg>")
    return "".join(out)


def _bound_line(line: Line, sx: Callable, sy: Callable, px0: float, px1: float) -> str:
    label = escape(line.label)
    if line.y is not None:
        y = float(sy(line.y))
        return (
            f'<line class="bound" x1="{px0}" x2="{px1}" y1="{y:.1f}" y2="{y:.1f}">'
            f"<title>{label}: {fmt(line.y)}</title></line>"
        )
    assert line.steps is not None and line.ys is not None
    cls = "median" if "median" in line.label or "reference" in line.label else "bound"
    return (
        f'<polyline class="{cls}" points="{_points(line.steps, line.ys, sx, sy)}">'
        f"<title>{label}</title></polyline>"
    )


def _axes(fig: Figure, x0, x1, y0, y1, sx, sy, box) -> str:
    px0, px1, py0, py1 = box
    out = [f'<rect class="frame" x="{px0}" y="{py1}" width="{px1 - px0}" height="{py0 - py1}"/>']
    for t in nice_ticks(y0, y1, 4):
        y = float(sy(t))
        out.append(
            f'<line class="grid" x1="{px0}" x2="{px1}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{px0 - 4}" y="{y + 3:.1f}" text-anchor="end">{fmt(t)}</text>'
        )
    for t in nice_ticks(x0, x1, 6):
        x = float(sx(t))
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{py0 + 14}" text-anchor="middle">{fmt(t)}</text>'
        )
    out.append(
        f'<text class="axis" x="{px1}" y="{py0 + 24}" text-anchor="end">'
        f"{escape(fig.step_key)}</text>"
    )
    return "".join(out)
