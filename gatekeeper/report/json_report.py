"""The JSON report: the whole verdict, for machines."""

from __future__ import annotations

import orjson

from gatekeeper.report.files import write_atomic
from gatekeeper.verdict import Verdict


def dumps(verdict: Verdict) -> bytes:
    return orjson.dumps(verdict.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


def write(verdict: Verdict, path: str) -> None:
    write_atomic(path, dumps(verdict) + b"\n")
