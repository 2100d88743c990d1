"""What an asynchronous `Gate` and its judge process say to each other: one JSON object
per line each way, on the judge's standard input and a private copy of its standard
output, read with Python's `json`.

- The `rows` request, the one the training thread writes at every step, is written by
  orjson (`encode_rows`: orjson itself ~8-11 us of the training thread against
  `json`'s 35-65 us, caches cold after a step; ~25 us with the pass over the row's
  values). orjson spells NaN as null, so a non-finite value goes as
  the string the row reader reads back as that very float ("NaN", "Infinity",
  "-Infinity": `rows.to_float`, the spelling of `statedata` and the JSONL markers).
- Every other message (`encode`) is written by `json`: a run config or a judged result
  may hold a non-finite float anywhere, which travels as the literal `NaN`/`Infinity`.

Requests: `start` (policies, overrides, the run, the axis, the start time), `rows`
(rows and the time), `update` (run metadata), `verdict`, `final` (the run's end state and
the time). Every answer is `{"ok": ...}` or `{"error": {"type", "message", ...}}`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from gatekeeper import errors
from gatekeeper.inprocess.local import Judged
from gatekeeper.inprocess.rows import PLAIN_TYPES, metric_name, to_float
from gatekeeper.session import Change
from gatekeeper.verdict import GateStatus, RuleResult, Status

MAX_LINE = 512 << 20  # an answer longer than this is a bug, never read whole


class JudgeProcessError(RuntimeError):
    """The judge process failed, ended or stopped answering: a bug (exit 70), never a
    verdict."""


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as its line; values that are not JSON (a run config's objects) as
    their `str`."""
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise JudgeProcessError(f"expected a JSON object, got {type(data).__name__}")
    return data


def plain(key: str, value: Any) -> Any:
    """A logged value as it travels: numbers, None and strings as they are (the judge
    reads them as `observe` would), a tensor or array scalar as its number; anything
    else is refused here as `observe` refuses it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return to_float(key, value)


_WIDE = 1 << 63  # an integer outside [-2**63, 2**63) goes as its float (orjson's range)


def plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as `encode_rows` writes it: plain values of exact types, a non-finite float
    as its marker string (read back as the same float)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        key = k if type(k) is str else metric_name(k)
        if type(v) not in PLAIN_TYPES:
            v = _exact(key, v)
        if type(v) is float and v - v != 0.0:  # NaN or an infinity
            v = "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"
        elif type(v) is int and not -_WIDE <= v < _WIDE:
            v = to_float(key, v)  # what the row reader makes of it (past float64: refused)
        out[key] = v
    return out


def _exact(key: str, value: Any) -> Any:
    """A value of another type (a tensor, a numpy scalar, a subclass) as one of the
    exact types orjson writes."""
    value = plain(key, value)
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value  # None


def encode_rows(rows: Iterable[Mapping[str, Any]], now: float, *, failing: bool) -> bytes:
    """The rows request's line (see the module docstring)."""
    message = {"op": "rows", "rows": [plain_row(r) for r in rows], "now": now,
               "failing": failing}
    return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)


def judged_to_dict(judged: Judged) -> dict[str, Any]:
    return {
        "status": judged.status.value,
        "changes": [[c.before.value if c.before else None, c.result.to_dict()]
                    for c in judged.changes],
        "failing": [r.to_dict() for r in judged.failing],
        "points": judged.points,
    }


SAME = "same"  # a rows answer's `failing`, asked not to send them: the caller's last ones
# answers that changed nothing and fail nothing, or whose failing rules were not asked for
QUIET = (b'"changes":[],"failing":[]', b'"changes":[],"failing":"' + SAME.encode() + b'"')


def judged_from_dict(data: Mapping[str, Any]) -> Judged:
    return Judged(
        status=GateStatus(data["status"]),
        changes=[Change(RuleResult.from_dict(r), Status(b) if b else None)
                 for b, r in data["changes"]],
        failing=[RuleResult.from_dict(r) for r in data["failing"]],
        points=int(data["points"]),
    )


def error_to_dict(exc: BaseException) -> dict[str, Any]:
    """A `GatekeeperError` keeps its type across the pipe; anything else is a bug."""
    if isinstance(exc, errors.GatekeeperError):
        return {"type": type(exc).__name__, "message": str(exc),
                "file": getattr(exc, "file", None), "line": getattr(exc, "line", None)}
    return {"type": "bug", "message": f"{type(exc).__name__}: {exc}"}


def error_from_dict(data: Mapping[str, Any]) -> Exception:
    cls = getattr(errors, str(data.get("type")), None)
    message = str(data.get("message"))
    if not (isinstance(cls, type) and issubclass(cls, errors.GatekeeperError)):
        return JudgeProcessError(f"the judge process failed: {message}")
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for attr in ("file", "line"):
        if data.get(attr) is not None:
            setattr(exc, attr, data[attr])
    return exc
