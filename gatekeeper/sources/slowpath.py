"""Saying that a source reads with its pure-Python path: a C extension that is not built
here (no C compiler at install), or not usable with what it reads. Never silently: an
INFO log line always, and a line on stderr under `--debug` or GATEKEEPER_DEBUG. The
callers cache what they decide, so each reason is said once a process."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def note_python_path(logger: str, what: str, why: str) -> None:
    """`what` (e.g. "wandb history is") is read by the pure-Python path, because `why`."""
    import logging  # here: most commands never get here, and logging costs start-up time

    msg = f"{what} read by the pure-Python path, several times slower: {why}"
    logging.getLogger(logger).info(msg)
    if "--debug" in sys.argv or os.environ.get("GATEKEEPER_DEBUG", "") not in ("", "0"):
        print(f"gatekeeper: {msg}", file=sys.stderr)


def load_extension(module: str, logger: str, what: str) -> Any:
    """The optional C extension `module`, or None when it is not built here (no C
    compiler at install), which is then noted (`note_python_path`)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        note_python_path(logger, what, f"the C extension is not built ({exc})")
        return None
