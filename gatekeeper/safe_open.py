"""Opening input files safely: regular files only.

A FIFO named `a.jsonl` blocks a reader forever; a link to /dev/zero never ends. Every
reader of run records, sidecars, policies and .wandb logs opens through `open_regular`;
files another library opens (mlflow's file store) are checked first with `check_regular`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import IO

from gatekeeper.errors import RecordError


def _not_regular(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = "a FIFO" if stat.S_ISFIFO(mode) else (
        "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
        "a directory" if stat.S_ISDIR(mode) else "a socket or special file"
    )
    return f"is {kind}, not a regular file; only regular files are read"


def open_regular(path: str, error: Callable[[str], Exception] | None = None) -> IO[bytes]:
    """Open `path` for reading only if it is a regular file: a FIFO would block forever and
    a device such as /dev/zero never ends. Non-blocking open, then fstat: no race."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        why = _not_regular(os.fstat(fd).st_mode)
        if why:
            raise (error(why) if error else RecordError(why, file=path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str, max_bytes: int, error: Callable[[str], Exception]) -> None:
    """Refuse `path` before another library opens it: not a regular file (a link is
    followed: one to /dev/zero is a device), larger than `max_bytes`, or unreadable.
    A stat, never an open: a FIFO cannot block it. (Checked, then opened by the library:
    a file swapped in between is not caught; `open_regular` is the race-free way.)"""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise error(f"cannot be read: {exc.strerror or exc}") from None
    why = _not_regular(info.st_mode)
    if why:
        raise error(why)
    if info.st_size > max_bytes:
        raise error(f"is {info.st_size} bytes, more than the {max_bytes} read")
