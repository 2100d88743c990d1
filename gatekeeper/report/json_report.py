"""The JSON report: the whole verdict, for machines; and reading one back (`report`,
`notify`)."""

from __future__ import annotations

from typing import Any

import orjson

from gatekeeper.errors import UsageError, one_line
from gatekeeper.report.files import write_atomic
from gatekeeper.verdict import Verdict

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY


def dumps(verdict: Verdict) -> bytes:
    data = verdict.to_dict()
    try:
        return orjson.dumps(data, option=_OPTIONS)
    except orjson.JSONEncodeError:
        # a lone surrogate (from a metric name in a damaged file) is not UTF-8: escape it
        return orjson.dumps(_text_safe(data), option=_OPTIONS)


def _text_safe(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_text_safe(k): _text_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text_safe(v) for v in value]
    return value


def write(verdict: Verdict, path: str) -> None:
    write_atomic(path, dumps(verdict) + b"\n")


def read(path: str) -> Verdict:
    """A JSON report `check|run --json` wrote. Anything else (a file that cannot be read,
    not JSON, or JSON of another shape, down to one result) is a UsageError naming the
    file, never a verdict half read or a bug (exit 70)."""
    try:
        with open(path, "rb") as fh:
            data = orjson.loads(fh.read())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    try:
        if not (isinstance(data, dict) and isinstance(data.get("results"), list)
                and isinstance(data.get("run"), dict) and "status" in data):
            raise ValueError("no status, run and results")
        if not all(isinstance(r, dict) for r in data["results"]):
            raise ValueError("a result that is not an object")
        return Verdict.from_dict(data)
    except (LookupError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise UsageError(
            f"{path}: not a gatekeeper JSON report ({one_line(str(exc))[:200]}); give a "
            "file `gatekeeper check|run --json FILE` wrote"
        ) from None
