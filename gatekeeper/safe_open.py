"""Opening input files safely: regular files only.

A FIFO named `a.jsonl` blocks a reader forever; a link to /dev/zero never ends. Every
reader of run records, sidecars, policies and .wandb logs opens through `open_regular`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import IO

from gatekeeper.errors import RecordError


def open_regular(path: str, error: Callable[[str], Exception] | None = None) -> IO[bytes]:
    """Open `path` for reading only if it is a regular file: a FIFO would block forever and
    a device such as /dev/zero never ends. Non-blocking open, then fstat: no race."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else (
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a directory" if stat.S_ISDIR(mode) else "a socket or special file"
            )
            message = f"is {kind}, not a regular file; only regular files are read"
            raise (error(message) if error else RecordError(message, file=path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
