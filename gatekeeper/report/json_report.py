"""The JSON report: the whole verdict, for machines."""

from __future__ import annotations

from typing import Any

import orjson

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
