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
naming it (exit 2), not a bug. A symbolic link is written through: its target gets the
report and the link stays (as `cp` and a shell redirection do).

`writable` tries a path before the work whose report it will hold (`run -- CMD`, `watch`),
so a typo in `--json` is found before an hour of training, not after it.
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
        raise _refused(path, exc, "cannot write the report") from None


def writable(path: str) -> None:
    """Raise the UsageError `write_atomic` would, for a path it could not write: its
    folder is made and a new file created and removed there (a stream path is only
    checked for write permission, as writing to it is the report)."""
    try:
        if _is_stream(path):
            if not os.access(path, os.W_OK):
                raise PermissionError(13, "Permission denied", path)
            return
        fd, tmp = _new_file(_folder(path))
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise _refused(path, exc, "cannot write the report there") from None


def _refused(path: str, exc: OSError, what: str) -> UsageError:
    return UsageError(f"{one_line(path)}: {what}: {exc.strerror or exc}; name a writable file")


def appendable(path: str, what: str) -> None:
    """Raise the UsageError `append_text` would, for a path it could not append to (it
    is opened for appending, nothing written)."""
    append_text(path, "", what)


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


def _folder(path: str) -> str:
    """The folder the report's new file goes in (made if missing): the link's target's,
    for a symbolic link."""
    directory = os.path.dirname(_through_link(path))
    os.makedirs(directory, exist_ok=True)
    return directory


def _through_link(path: str) -> str:
    """`path`, or where it leads if it is a symbolic link (one that leads nowhere yet
    included: the report is created at its target)."""
    return os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)


def _replace(path: str, data: bytes) -> None:
    fd, tmp = _new_file(_folder(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, _through_link(path))
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
