"""Writing report files so a reader never sees half of one.

A report is written to a new file beside its path, then renamed over it (atomic on one
file system). The new file is created with mode 0666 and the process umask applied by the
kernel, as `open()` and a shell redirection create files: under the usual umask 022 a
report is 0644, readable by the artifact uploader or web server that serves it (a
`tempfile.mkstemp` file is 0600 whatever the umask). No umask is read or set: setting
it to read it would race with other threads creating files.
"""

from __future__ import annotations

import os
import secrets

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: str, data: bytes) -> None:
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
