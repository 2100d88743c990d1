"""Writing report files so a reader never sees half of one.

A report is written to a new file beside its path, then renamed over it (atomic on one
file system). The new file is created with mode 0666 and the process umask applied by the
kernel, as `open()` and a shell redirection create files: under the usual umask 022 a
report is 0644, readable by the artifact uploader or web server that serves it (a
`tempfile.mkstemp` file is 0600 whatever the umask). No umask is read or set: setting
it to read it would race with other threads creating files.

A path that is not a regular file, or lies under /dev or /proc, is never renamed over:
`--json /dev/stdout`, a pipe or a device is written to as a stream (renaming over it
replaced the device node or the /dev/stdout link itself, as root), and a directory is
refused. A path that cannot be written is a usage error
naming it (exit 2), not a bug.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat

from gatekeeper.errors import UsageError, one_line

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: str, data: bytes) -> None:
    try:
        if _is_stream(path):
            _write_stream(path, data)
        else:
            _replace(path, data)
    except OSError as exc:
        raise UsageError(
            f"{one_line(path)}: cannot write the report: {exc.strerror or exc}; name a "
            "writable file"
        ) from None


def append_text(path: str, text: str, what: str) -> None:
    """Append `text` to `path` (the GitHub step summary); one that cannot be written is a
    usage error naming it (exit 2), as for a report file."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(
            f"{one_line(path)}: cannot write {what}: {exc.strerror or exc}"
        ) from None


def _is_stream(path: str) -> bool:
    """Whether `path` (links followed) is a device, pipe or socket, or lies under /dev or
    /proc (`/dev/stdout` redirected to a file is a link to a regular file: renamed over,
    the link itself would go); a directory raises."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "it is a directory", path)
    return os.path.abspath(path).startswith(("/dev/", "/proc/")) or not stat.S_ISREG(mode)


def _write_stream(path: str, data: bytes) -> None:
    """Write to a device or pipe as a shell redirection would. Opened non-blocking, so a
    pipe nobody reads is an error (ENXIO) rather than a wait without end."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)  # its reader sets the pace
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _replace(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _new_file(directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _new_file(directory: str) -> tuple[int, str]:
    """A file of a fresh random name in `directory`, opened for writing (O_EXCL: never
    one that exists, nor a link planted under that name)."""
    for _ in range(100):
        tmp = os.path.join(directory, f".gatekeeper-{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")
