"""The one exception hierarchy of gatekeeper.

GatekeeperError                 base; the CLI maps every subclass to exit code 2
├── UsageError                  bad command-line arguments or option values
├── PolicyError                 a policy file is invalid (names file:line and field)
├── SourceError                 a run source cannot be read
│   ├── SourceNotFound          the path or run does not exist (yet)
│   ├── RecordError             a record is malformed (names file:line and what was found)
│   └── SourceUnavailable       a remote source failed after bounded retries
├── ConfigError                 a daemon/history configuration is invalid
└── StateError                  persisted state (daemon state, history store) is unusable

A failing gate is not an exception: it is a Verdict whose status is FAIL. Any other
exception is a bug: the CLI exits with INTERNAL_ERROR (70, sysexits' EX_SOFTWARE), never
with 1 (gate failed) or 2 (could not evaluate).

Messages quote input (metric names, paths, values) through `quote`/`one_line`, so a
newline or a control character in a name can never end the one error line and start a
line of its own (a GitHub `::warning` workflow command, say).
"""

from __future__ import annotations

import json
import re
from typing import Any

INTERNAL_ERROR = 70
# C0/C1 controls, DEL, the Unicode line/paragraph separators and lone surrogates: anything
# that could break a line, rewrite a terminal or fail to encode as UTF-8.
# (compiled when first needed: a Unicode range costs ~0.6 ms, mostly on error paths)
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]"


def _escape_char(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(c) or (
        f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    )


def one_line(text: str) -> str:
    """`text` with every line break, control character and lone surrogate escaped."""
    if text.isascii() and text.isprintable():  # printable ASCII has none of them
        return text
    return re.sub(_UNSAFE, _escape_char, text)


def shown_url(text: str) -> str:
    """`text` without the user:password@ of a URL in it, for messages."""
    return re.sub(r"//[^/@\s]*@", "//", text)


def quote(value: Any, limit: int = 60) -> str:
    """A value found in input, as an error message shows it: JSON-like, escaped, bounded,
    a URL without its user:password@.

    Never recursive and never fails: a deep or huge value is summarized by type and size.
    """
    if isinstance(value, str):
        text = json.dumps(shown_url(value[: limit * 2]), ensure_ascii=False)
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, int):
        digits = value.bit_length() * 0.30103
        text = str(value) if digits < 40 else f"an integer of about {int(digits) + 1} digits"
    elif isinstance(value, float):
        text = json.dumps(value)  # NaN, Infinity as JSON spells them
    elif isinstance(value, (list, tuple)):
        text = _shallow(value, "[", "]")
        text = text if len(value) <= 4 else f"a list of {len(value)}: {text}"
    elif isinstance(value, dict):
        text = _shallow(value, "{", "}")
        text = text if len(value) <= 4 else f"an object of {len(value)} fields: {text}"
    elif isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value[: limit * 2]))
    else:
        text = f"a {type(value).__name__}"
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shallow(value: Any, open_: str, close: str) -> str:
    """One level of a container: scalars shown, nested containers as [...] / {...}."""

    def item(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return "[...]"
        if isinstance(v, dict):
            return "{...}"
        return quote(v, 24)

    if isinstance(value, dict):
        parts = [f"{quote(str(k), 24)}: {item(v)}" for k, v in list(value.items())[:4]]
    else:
        parts = [item(v) for v in list(value)[:4]]
    more = ", ..." if len(value) > 4 else ""
    return open_ + ", ".join(parts) + more + close


class GatekeeperError(Exception):
    """Base of every error gatekeeper raises on purpose."""

    exit_code = 2


class UsageError(GatekeeperError):
    """A command-line argument or option value is wrong."""


class PolicyError(GatekeeperError):
    """A policy file is invalid. The message names file:line and the field."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")


class SourceError(GatekeeperError):
    """A run source cannot be read."""


class SourceNotFound(SourceError):
    """The source path or remote run does not exist (yet)."""


class RecordError(SourceError):
    """A metric record is malformed. The message names file:line and what was found."""

    def __init__(self, message: str, *, file: str, line: int | None = None):
        self.file = file
        self.line = line
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")


class SourceUnavailable(SourceError):
    """A remote source kept failing after bounded retries."""


class ConfigError(GatekeeperError):
    """A configuration file (daemon, history) is invalid."""


class StateError(GatekeeperError):
    """Persisted state is corrupt or of an unknown version; never silently reset."""
