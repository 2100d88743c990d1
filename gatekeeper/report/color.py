"""Whether the console report is coloured: `--color auto|always|never`.

`always` and `never` are what they say, whatever the environment (a flag wins over a
variable, as no-color.org asks). `auto` follows the conventions pytest and most CLIs
share, in this order: NO_COLOR set and not empty turns colour off; FORCE_COLOR set and not
empty turns it on; otherwise the stream is coloured when it is a terminal (a pipe, a file
or a CI log gets plain text). Colour here is every ANSI escape: bold and dim go with it.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

from gatekeeper.errors import UsageError

MODES = ("auto", "always", "never")


def wants_color(mode: str, stream: TextIO) -> bool:
    """Whether a report printed on `stream` under `mode` carries ANSI escapes."""
    if mode not in MODES:
        raise UsageError(f"color mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "auto":
        return mode == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def console_options(mode: str, stream: TextIO) -> dict[str, Any]:
    """The rich Console arguments for `mode`: decided here, so rich's own reading of
    NO_COLOR, FORCE_COLOR and TERM cannot overrule the flag."""
    if wants_color(mode, stream):
        # the 16 standard colours (all the report uses), even where TERM is unset or dumb
        return {"force_terminal": True, "color_system": "standard", "no_color": False}
    return {"force_terminal": False, "color_system": None, "no_color": True}
