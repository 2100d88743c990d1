"""Numbers and counts as a person reads them in messages and reports."""

from __future__ import annotations

import math


def fmt(x: float | None) -> str:
    """A number as a person reads it in a report: short, exact enough, NaN/Inf spelled out."""
    if x is None:
        return "-"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 window`, `3 windows`, `1 coordinate`: counts in messages read as English."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
