"""Find every process CMD started, including those that left its process group.

Ray workers (and any daemon) call setsid: a signal to CMD's process group misses them,
and once their parent exits they are re-parented to init, losing their ancestry. Two
marks survive that: the ancestry recorded while the parent was alive (`Descendants.record`,
called on every poll), and an environment variable set for CMD that every descendant
inherits and no re-parenting or setsid removes (read from /proc/PID/environ). Both need
Linux's /proc; elsewhere `available` is False and only the process group is stopped.
A pid is kept with its start time so that a reused pid is never signalled.
"""

from __future__ import annotations

import os
import uuid

MARK_ENV = "GATEKEEPER_RUN_MARK"
_PROC = "/proc"
NOTE_NO_PROC = (
    "gatekeeper: note: no /proc here: only CMD's process group is stopped; processes "
    "it started in a new session (setsid, e.g. Ray workers) are not tracked"
)


def new_mark() -> str:
    return uuid.uuid4().hex


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks), None when the process is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0].decode(), int(fields[19])


def _has_mark(pid: int, mark: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as fh:
            return mark in fh.read().split(b"\0")
    except OSError:  # gone, or another user's process: not ours to signal
        return False


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return []


class Descendants:
    """The processes descended from `root` (CMD), as far as /proc shows them."""

    def __init__(self, root: int, mark: str):
        self.root = root
        self.mark = f"{MARK_ENV}={mark}".encode()
        self.available = os.path.isdir(f"{_PROC}/self")
        self.known: dict[int, int] = {}  # pid -> start time, CMD itself excluded

    def record(self) -> None:
        """Add the descendants alive now: by ancestry from CMD or a known descendant,
        or by the environment mark. Cheap enough for every poll (one /proc scan)."""
        if not self.available:
            return
        stats = {pid: s for pid in _pids() if (s := _stat(pid)) is not None}
        roots = {self.root, *self.known}
        children: dict[int, list[int]] = {}
        for pid, (ppid, _state, _start) in stats.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(roots)
        while todo:  # bounded: each pid is visited once
            for child in children.pop(todo.pop(), []):
                if child != self.root and child not in self.known:
                    self.known[child] = stats[child][2]
                    todo.append(child)
        me = os.getpid()
        for pid, (_ppid, state, start) in stats.items():
            if pid not in (me, self.root) and pid not in self.known and state != "Z":
                if _has_mark(pid, self.mark):
                    self.known[pid] = start

    def alive(self) -> list[int]:
        """The known descendants still running (a zombie has already exited; a pid
        whose start time changed is someone else's now)."""
        live = []
        for pid, start in list(self.known.items()):
            stat = _stat(pid)
            if stat is None or stat[2] != start:
                del self.known[pid]
            elif stat[1] != "Z":
                live.append(pid)
        return live

    def signal(self, sig: int, only: list[int]) -> list[int]:
        """Send `sig` to those of `only` (pids from `alive`); the pids it reached."""
        sent = []
        for pid in only:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
            sent.append(pid)
        return sent
