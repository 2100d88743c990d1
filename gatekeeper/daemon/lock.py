"""One daemon per SQLite state file: an OS lock held for the process's life.

`WriterLock.take(db_path)` opens `DB.lock` beside the state file and takes an exclusive
`flock` on it without waiting. The kernel drops the lock when the process ends, however
it ends (kill -9 included), so a stale lock file never blocks a restart. The holder
writes who it is (pid, host, start time) into the file; a second daemon that cannot take
the lock reads that line and refuses to start with a StateError (exit 2) naming it.

`flock` is advisory and local: it holds between processes on one machine and on local
disks; on a network filesystem it may not (docs/daemon.md "Scaling out").
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import datetime, timezone

from gatekeeper.errors import StateError


class WriterLock:
    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, db_path: str) -> WriterLock:
        # the real path: a symlink to the file and the file itself share one lock
        os.makedirs(os.path.dirname(os.path.abspath(db_path)), exist_ok=True)
        path = os.path.realpath(db_path) + ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateError(
                f"state file {db_path} is in use by another gatekeeper serve "
                f"({holder(path)}; lock {path}): one daemon per SQLite state file; stop "
                "that one, or share a PostgreSQL state between replicas (docs/daemon.md "
                "'Scaling out')"
            ) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Drop the lock (the file stays: deleting it would race a starting daemon)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def holder(path: str) -> str:
    """'pid N on host H since T' from the lock file, or why it cannot be said."""
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.loads(fh.readline() or "null")
        return f"pid {found['pid']} on host {found['host']} since {found['since']}"
    except (OSError, ValueError, TypeError, KeyError):
        return "holder not recorded yet: it is starting"
