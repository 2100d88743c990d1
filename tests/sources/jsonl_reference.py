"""What a JSONL run means, read the plainest way: `json.loads` per line, point by point.

The definition-level oracle for `gatekeeper.sources.jsonl.reader`: slow, obvious, and
written from docs (docs/sources.md's record forms, docs/jsonl-reading.md), not from the reader.
`reference(data)` gives each metric's points as (step, value bits) in file order, its
step axis, the metrics a null record step makes unjudgeable and the end markers; or
raises `Refused` (with the line) where the reader must give a file:line error.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

MARKERS = {"nan": math.nan, "+nan": math.nan, "-nan": math.nan, "inf": math.inf,
           "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
           "-inf": -math.inf, "-infinity": -math.inf}
ALIASES = {"perf": "rollout/step"}
EVENT_KEYS = {"event", "state", "time", "message", "reason"}


class Refused(Exception):
    """The file is bad input; `line` is where (its first bad line, in the reader's order)."""


def _bits(value: float) -> bytes:
    """A value's float64 bits, every NaN alike (its sign is not part of the definition)."""
    return struct.pack("<d", math.nan if math.isnan(value) else value)


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(text)
    return value


def _loads(raw: bytes) -> Any:
    text = raw.decode("utf-8")  # UnicodeDecodeError: a ValueError
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise ValueError("lone surrogate")
    return json.loads(text, parse_float=_number, parse_int=int)


def value(v: Any) -> float:
    if isinstance(v, (bool, int, float)):
        return float(v)  # OverflowError for an int beyond a float64
    if v is None:
        return math.nan
    if isinstance(v, str) and v.strip().lower() in MARKERS:
        return MARKERS[v.strip().lower()]
    raise ValueError(v)


def step(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(v)
    if isinstance(v, float) and not (v.is_integer() and abs(v) <= 2.0**53):
        raise ValueError(v)
    if not -(2**63) <= int(v) < 2**63:
        raise ValueError(v)
    return int(v)


def axis(key: str, keys: Any) -> str | None:
    ns, sep, _ = key.partition("/")
    options = [f"{ns}/step", *([ALIASES[ns]] if ns in ALIASES else [])] if sep else []
    return next((c for c in [*options, "step", "_step"] if c in keys), None)


def is_step(key: str) -> bool:
    return key in ("step", "_step") or key.endswith("/step")


def reference(data: bytes) -> tuple[dict[str, list[tuple[int, bytes]]], dict[str, str],
                                    set[str], list[dict[str, Any]]]:
    lines = data.split(b"\n")
    if lines[-1].strip():
        raise Refused(len(lines))  # truncated: no newline after the last line
    objs = []
    for n, raw in enumerate(lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            objs.append((n, _loads(raw)))
        except (ValueError, RecursionError):
            raise Refused(n) from None
    points: dict[str, list[tuple[int, bytes]]] = {}
    axes: dict[str, str] = {}
    unjudgeable: set[str] = set()
    events = []
    for n, obj in objs:
        if not isinstance(obj, dict):
            raise Refused(n)
    for n, obj in objs:
        try:
            if "metric" in obj and "series" in obj:
                _record(obj, points, axes, unjudgeable)
            elif "event" in obj and set(obj) <= EVENT_KEYS:
                events.append({**obj, "line": n})
            else:
                _row(obj, points, axes)
        except (ValueError, TypeError, OverflowError, KeyError):
            raise Refused(n) from None
    return points, axes, unjudgeable, events


def _add(metric: str, on: str, pts: list[tuple[int, bytes]], points: dict[str, Any],
         axes: dict[str, str]) -> None:
    if axes.setdefault(metric, on) != on:
        raise ValueError(metric)
    points.setdefault(metric, []).extend(pts)


def _record(obj: dict[str, Any], points: dict[str, Any], axes: dict[str, str],
            unjudgeable: set[str]) -> None:
    metric, series = obj["metric"], obj["series"]
    on = obj.get("step_key")
    if not isinstance(metric, str) or not metric or not isinstance(series, list):
        raise ValueError(metric)
    if on is None:
        ns, sep, _ = metric.partition("/")
        on = ALIASES.get(ns, f"{ns}/step") if sep else "step"
    if not isinstance(on, str) or not on:
        raise ValueError(on)
    pts = []
    for point in series:
        if not isinstance(point, list) or len(point) != 2:
            raise ValueError(point)
        if point[0] is None:
            unjudgeable.add(metric)
            continue
        pts.append((step(point[0]), _bits(value(point[1]))))
    _add(metric, on, pts, points, axes)


def _row(obj: dict[str, Any], points: dict[str, Any], axes: dict[str, str]) -> None:
    for key, v in obj.items():
        if is_step(key):
            continue
        on = axis(key, obj)
        if on is None:
            raise ValueError(key)
        _add(key, on, [(step(obj[on]), _bits(value(v)))], points, axes)
