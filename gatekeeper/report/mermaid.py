"""Small charts GitHub renders natively in Markdown: Mermaid `xychart-beta` blocks, one per
failing rule, for the step summary.

xychart-beta draws lines over evenly spaced categories, so the series is resampled into
`POINTS` buckets over its step range; each bucket shows its most extreme point (the one
farthest from the bucket's median), so a spike or a violating point is never averaged
away. The bound is a second, flat line. Text is reduced to a safe character set: a metric
name is attacker-controlled and a backtick could close the code fence.
"""

from __future__ import annotations

import math
import re

import numpy as np

from gatekeeper.report.html_series import Figure

POINTS = 48
_UNSAFE = re.compile(r"[^A-Za-z0-9 _\-./:=,+*()]")


def label(text: str, limit: int = 80) -> str:
    """Text safe inside a quoted Mermaid string in a Markdown code fence."""
    clean = _UNSAFE.sub("_", text.replace("<", "(").replace(">", ")"))
    return clean[:limit]


def _decimals(lo: float, hi: float) -> int:
    """Enough decimals to tell values apart across [lo, hi], and no exponent (which the
    xychart grammar does not read)."""
    span = max(hi - lo, abs(hi), abs(lo), 1e-12)
    return int(min(12, max(0, 3 - math.floor(math.log10(span)))))


def _num(v: float, d: int) -> str:
    text = f"{v:.{d}f}"
    return "0" if float(text) == 0 else text


def resample(fig: Figure, n: int = POINTS) -> tuple[list[int], list[float]]:
    """Bucket representatives: (their steps, their values) — per bucket of the step range
    its most extreme point; a bucket holding a violating point shows that point."""
    steps, values = fig.steps, fig.values
    if steps.size <= n:
        return steps.tolist(), values.tolist()
    edges = np.linspace(float(steps[0]), float(steps[-1]) + 1, n + 1)
    which = np.clip(np.searchsorted(edges, steps, side="right") - 1, 0, n - 1)
    marked = {s for s, _ in fig.marks}
    xs, ys = [], []
    for b in range(n):
        idx = np.flatnonzero(which == b)
        if not idx.size:
            continue
        hit = [int(i) for i in idx if int(steps[i]) in marked]
        if hit:
            i = hit[0]
        else:
            dev = np.abs(values[idx] - np.median(values[idx]))
            i = int(idx[int(np.argmax(dev))])
        xs.append(int(steps[i]))
        ys.append(float(values[i]))
    return xs, ys


def xychart(fig: Figure, title: str) -> str | None:
    """A ```mermaid block, or None when there is nothing to draw."""
    if not fig.steps.size:
        return None
    xs, ys = resample(fig)
    bounds = [line.y for line in fig.lines if line.y is not None]
    if fig.band:
        bounds += [v for v in fig.band if math.isfinite(v)]
    # bounds that follow the run (spike's rolling median and threshold), at the same steps
    following = [
        np.interp(xs, line.steps, line.ys).tolist()
        for line in fig.lines
        if line.steps is not None and line.ys is not None and line.steps.size
    ]
    every = ys + bounds + [v for f in following for v in f]
    lo, hi = min(every), max(every)
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    d = _decimals(lo, hi)
    pad = (hi - lo) * 0.05
    out = [
        "```mermaid",
        "xychart-beta",
        f'    title "{label(title)}"',
        f'    x-axis "{label(fig.step_key, 40)}" {xs[0]} --> {max(int(fig.steps[-1]), xs[0] + 1)}',
        f'    y-axis "{label(fig.metric, 40)}" {_num(lo - pad, d)} --> {_num(hi + pad, d)}',
        f"    line [{', '.join(_num(v, d) for v in ys)}]",
    ]
    for b in dict.fromkeys(_num(b, d) for b in bounds):  # each distinct bound once, flat
        out.append(f"    line [{', '.join([b] * len(ys))}]")
    for f in following:
        out.append(f"    line [{', '.join(_num(v, d) for v in f)}]")
    out.append("```")
    return "\n".join(out)
