"""Series in promtool's expanding notation, so one input reads the same in a gatekeeper
test and in a generated `promtool test rules` file.

    1 2 3          three points
    0.5+0.1x3      0.5 0.6 0.7 0.8  (start, then n increments: n + 1 points)
    2-1x2          2 1 0
    7x2            7 7 7            (a repeat: 7+0x2)
    _  _x3         one gap, three gaps (no point at those positions)
    stale          a gap too (Prometheus' staleness marker: no value there)
    NaN Inf -Inf   non-finite points

Position i of the expanded list is step `start + i * every` of the metric's axis.
Hand-written: a regular expression per token, no eval.
"""

from __future__ import annotations

import math
import re

# An unsigned decimal number, written so that a string splits one way only (`[0-9]+\.?[0-9]*`
# split "1111" many ways: a cell of digits that failed took time quadratic in its length).
# Shared with the recipe reader (toolkit/recipe.py).
NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_SPECIAL = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
_TOKEN = re.compile(rf"^(?P<start>[-+]?{NUMBER})(?:(?P<op>[-+])(?P<inc>{NUMBER}))?x(?P<n>[0-9]+)$")
_GAPS = re.compile(r"^_(?:x(?P<n>[0-9]+))?$")
_PLAIN = re.compile(rf"^[-+]?{NUMBER}$")
MAX_POINTS = 1_000_000  # a typo like 1x10000000000 must not eat the machine


class NotationError(ValueError):
    """A series string does not parse; the message names the token and what is accepted."""


def expand(text: str) -> list[float | None]:
    """The values of a series string; None marks a gap (no point at that position)."""
    out: list[float | None] = []
    for token in str(text).split():
        out.extend(_token(token))
        if len(out) > MAX_POINTS:
            raise NotationError(f"series expands to more than {MAX_POINTS} points")
    return out


def _token(token: str) -> list[float | None]:
    low = token.lower()
    if low in _SPECIAL:
        return [_SPECIAL[low]]
    if low == "stale":
        return [None]
    gaps = _GAPS.match(token)
    if gaps:
        return [None] * int(gaps.group("n") or 1)
    if _PLAIN.match(token):
        return [float(token)]
    m = _TOKEN.match(token)
    if m is None:
        raise NotationError(
            f"cannot read {token!r}: expected a number, NaN, Inf, -Inf, _, _xN, stale, "
            "aXn (a repeated) or a+bXn / a-bXn (a, then n increments of b)"
        )
    start, n = float(m.group("start")), int(m.group("n"))
    inc = float(m.group("inc") or 0.0) * (-1 if m.group("op") == "-" else 1)
    if n + 1 > MAX_POINTS:
        raise NotationError(f"{token!r} expands to more than {MAX_POINTS} points")
    return [start + i * inc for i in range(n + 1)]
