"""A JSONL line that orjson refused, read again: a blank line, a bare NaN, or its error.

Python's json writes bare NaN/Infinity, which orjson rejects; only such lines are re-read
with `json` (strict UTF-8, no lone surrogates, no number beyond a float64, no unbounded
recursion). Any other line orjson refuses is `not valid JSON (...)` naming file:line.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from gatekeeper.errors import RecordError, quote
from gatekeeper.sources.jsonl.values import finite_float, int_text

BLANK = object()  # what `reload_line` gives for a blank line
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def reload_line(raw: bytes, path: str, line: int) -> Any:
    """The line `raw`, as the file holds it (newline included where it has one), after
    orjson refused it: `BLANK`, the object `json` reads from a bare NaN line, or raises
    the line's RecordError."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if not raw.strip():
            return BLANK
        if b"NaN" not in raw and b"Infinity" not in raw:
            raise _not_json(raw, path, line, _orjson_why(exc)) from None
    try:
        text = raw.decode("utf-8")
        if _SURROGATE_ESCAPE.search(raw):
            raise ValueError("a \\u escape of a lone surrogate is not text")
        return json.loads(text, parse_float=finite_float, parse_int=int_text)
    except UnicodeDecodeError as err:
        why = f"not UTF-8 at byte {err.start} of the line"
        raise _not_json(raw, path, line, why) from None
    except RecursionError:
        raise _not_json(raw, path, line, "nested too deeply") from None
    except ValueError as err:
        raise _not_json(raw, path, line, str(err)) from None


def _orjson_why(exc: orjson.JSONDecodeError) -> str:
    # orjson counts lines and columns within this one line: say "byte" instead
    why = re.sub(r": line 1 column \d+ \(char (\d+)\)$", r" at byte \1 of the line", str(exc))
    return why.replace(
        "number is infinity when parsed as double", "a number out of range of a float64"
    )


def _not_json(raw: bytes, path: str, line: int, why: str) -> RecordError:
    return RecordError(
        f"not valid JSON ({why}): {quote(raw[:60].decode('utf-8', 'replace'))}",
        file=path,
        line=line,
    )
