"""JSON values of a record line as steps and metric values, exactly and never silently.

A step is a whole number that fits int64 (a float only within 2**53, where it is exact);
a value is a number, null (a non-finite point) or a marker ("NaN", "Infinity",
"-Infinity"). numpy converts a column fast but too kindly (true is 1, "0.5" is 0.5, 2**63
wraps): the helpers here decide where its result can be trusted and where the written
value must be looked at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import STEP_DTYPE, STEP_MAX, STEP_MIN

MARKERS = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}

EXACT = 2.0**53  # beyond this a float64 step may stand for another whole number


def coerce_value(value: Any, path: str, line: int, what: str) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, int):  # bool is an int: logged flags judge as 0/1
        try:
            return float(value)
        except OverflowError:
            raise RecordError(
                f"{what}: number {quote(value)} is out of range of a float64", file=path, line=line
            ) from None
    if value is None:
        return math.nan  # a null point is non-finite: an error at its step, never a pass
    if isinstance(value, str):
        marker = MARKERS.get(value.strip().lower())
        if marker is not None:
            return marker
    raise RecordError(
        f"{what}: expected a number, null or one of \"NaN\", \"Infinity\", \"-Infinity\", "
        f"got {quote(value)}"
        + (" (a number in a string is not a number)" if _numeric(value) else ""),
        file=path,
        line=line,
    )


def _numeric(value: Any) -> bool:
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def step_of(value: Any, path: str, line: int, what: str) -> int:
    """A step as written: a whole number that fits int64 (3 and 3.0; not true, "3", 1e300)."""
    if isinstance(value, int) and not isinstance(value, bool) and STEP_MIN <= value <= STEP_MAX:
        return value
    # A float step must be exact: beyond 2**53 it may stand for another whole number (and
    # orjson reads an integer below -2**63 as the float -2**63: INT64_MIN, wrongly).
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT:
        return int(value)
    raise RecordError(
        f"{what} must be a whole number that fits int64 (-2**63 .. 2**63-1; written with a "
        f"fraction or exponent, within 2**53), got {quote(value)}",
        file=path,
        line=line,
    )


def fast_floats(values: Iterable[Any], count: int) -> np.ndarray | None:
    """`count` values as one float64 array, or None when anything is not a plain number —
    the caller then converts value by value, with errors naming the line. numpy turns
    null into NaN (as it should: a null point is non-finite) but also parses any string
    ("0.5", "1_000"): callers only come here when the line's bytes show that no string is
    among the values, or after checking that every string there is a marker."""
    try:
        return np.fromiter(values, dtype=np.float64, count=count)
    except (TypeError, ValueError, OverflowError):
        return None


def only_marker_strings(values: Any) -> bool:
    return all(not isinstance(v, str) or v.strip().lower() in MARKERS for v in values)


def as_steps(
    col: np.ndarray, originals: Callable[[], Sequence[Any]], path: str,
    lines: Sequence[int] | Same, what: Callable[[int], str],
) -> np.ndarray:
    """A float64 step column as int64 — exactly. Where the floats cannot be trusted (0 and
    1 may have been true/false; beyond 2**53 a float may stand for another whole number;
    NaN, fractions, out of int64 range), the written values decide, point by point."""
    doubt = ~(np.abs(col) < EXACT) | (col != np.floor(col)) | (col == 0) | (col == 1)
    if not doubt.any():
        return col.astype(STEP_DTYPE)
    out = np.where(doubt, 0.0, col).astype(STEP_DTYPE)
    raw = originals()
    for i in np.flatnonzero(doubt).tolist():
        out[i] = step_of(raw[i], path, lines[i], what(i))
    return out


def key_quotes(keys: Sequence[str]) -> int:
    """How many '"' bytes the keys of a line take, or -1 when that cannot be told from the
    text (a quote inside a key may be written `\\"` or `\\u0022`)."""
    if any('"' in k for k in keys):
        return -1
    return 2 * len(keys)


def record_quotes(obj: dict[str, Any]) -> int:
    """The '"' bytes a record line takes outside its series (-1: cannot tell)."""
    n = key_quotes(list(obj))
    for key, v in obj.items():
        if key == "series" or v is None or isinstance(v, (int, float)):
            continue
        if not isinstance(v, str) or '"' in v:
            return -1
        n += 2
    return n


class Same:
    """A sequence that is one value at every index (the line of every point of a record)."""

    def __init__(self, value: int):
        self.value = value

    def __getitem__(self, i: int) -> int:
        return self.value


def finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range of a float64")
    return value


def int_text(text: str) -> int:
    return int(text)  # Python refuses > 4300 digits itself (a ValueError, reported)
