"""`RemoteJudge`: a `LocalJudge` in a child process (`judge.py`), behind the same calls.

Started when an asynchronous `Gate` is made, so policy errors still surface before the
first training step. Each call is one request and one answer (`wire.py`), bounded in time
(`timeout`) and size; the caller serializes calls (the gate's lock). Rows may also be
sent ahead of their answers (`send_rows`, then `take` in order): the training thread
sends a step and reads its judgement a step later. Any other call first reads the
answers still owed, kept for `take`. A request larger than `PIPELINED` is sent only once
nothing is owed, so the two pipes never both fill (a deadlock). The child is
`sys.executable` running `gatekeeper.inprocess.judge` of this very gatekeeper; it imports
neither torch nor the trainer, and ends with `final`, `close`, or this process.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gatekeeper.inprocess.local import Judged
from gatekeeper.inprocess.wire import (
    MAX_LINE,
    QUIET,
    SAME,
    JudgeProcessError,
    decode,
    encode,
    encode_rows,
    error_from_dict,
    judged_from_dict,
)
from gatekeeper.model import Run, RunState
from gatekeeper.verdict import GateStatus, RuleResult, Verdict

TIMEOUT = 300.0  # seconds one answer may take: a batch of rows, or the final verdict
PIPELINED = 16 << 10  # bytes: a rows request sent while answers are owed is at most this


# The child's first lines: the gatekeeper this process runs, found first only when the
# child's own path would import another one (PYTHONPATH would put it before the standard
# library for every import, where a backport in site-packages could shadow a module).
_BOOT = """import importlib.util, os, sys
home = sys.argv[1]
spec = importlib.util.find_spec("gatekeeper")
if spec is None or os.path.realpath(os.path.dirname(os.path.dirname(spec.origin))) != home:
    sys.path.insert(0, home)
from gatekeeper.inprocess.judge import main
raise SystemExit(main())
"""


def _spawn() -> subprocess.Popen[bytes]:
    home = os.path.realpath(Path(__file__).resolve().parents[2])  # the folder of `gatekeeper`
    return subprocess.Popen(
        [sys.executable, "-c", _BOOT, home], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        close_fds=True,
    )


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Close the child's input (it ends) and reap it; kill it if it does not end."""
    if proc.stdin is not None and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class RemoteJudge:
    """The `LocalJudge` calls, answered by the judge process."""

    def __init__(self, policies: Sequence[str], overrides: Sequence[str], run: Run,
                 axis: str, started: float, *, timeout: float = TIMEOUT):
        self._timeout = timeout
        self._buf = bytearray()
        self._owed = 0  # rows requests sent whose answers are not read yet
        self._ready: deque[bytes] = deque()  # answers read ahead of `take` (in order)
        # the last answer that changed nothing (and failed nothing, or was not asked what
        # fails), and what it said
        self._quiet: tuple[bytes, Judged] = (b"", Judged(GateStatus.PENDING))
        self._failing: list[RuleResult] = []  # what the last rows answer said failed
        self._proc = _spawn()
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)  # read by `_line` only
        self._ender = weakref.finalize(self, _end, self._proc)
        try:
            self._call({"op": "start", "policies": list(policies), "overrides": list(overrides),
                        "run": {"name": run.name, "source": run.source, "tags": list(run.tags),
                                "config": run.config},
                        "axis": axis, "started": started})
        except BaseException:
            self.close()
            raise

    def observe_rows(self, rows: Iterable[Mapping[str, Any]], now: float) -> Judged:
        self._collect()
        return self._judged(self._exchange(encode_rows(rows, now, failing=True)))

    def send_rows(self, rows: Iterable[Mapping[str, Any]], now: float, *,
                  failing: bool = True) -> None:
        """Send rows without waiting: `take` gives their judgement (answers in order).
        `failing=False`: the caller does not need the failing rules again (they come as
        the last ones it had)."""
        request = encode_rows(rows, now, failing=failing)
        if len(request) > PIPELINED:
            self._collect()
        self._write(request)
        self._owed += 1

    def take(self) -> Judged:
        """The judgement of the oldest rows sent by `send_rows` and not yet taken."""
        if self._ready:
            return self._judged(self._ready.popleft())
        if not self._owed:
            raise JudgeProcessError("take() without rows sent")
        line = self._line()
        self._owed -= 1
        return self._judged(line)

    def _judged(self, line: bytes) -> Judged:
        """A rows answer: one word for word the same as the last answer that changed
        nothing (most steps) is not decoded again; `SAME` failing rules (not asked for)
        are the last ones decoded."""
        if line == self._quiet[0]:
            quiet = self._quiet[1]
            failing = list(self._failing) if QUIET[1] in line else []
            return Judged(quiet.status, [], failing, quiet.points)
        data = self._answer(line)
        same = data["failing"] == SAME
        if same:
            data["failing"] = []
        judged = judged_from_dict(data)
        if same:
            judged = Judged(judged.status, judged.changes, list(self._failing), judged.points)
        else:
            self._failing = list(judged.failing)
        if any(q in line for q in QUIET):
            self._quiet = (line, judged)
        return judged

    def update_run(self, name: str | None, tags: Iterable[str] | None,
                   config: Mapping[str, Any] | None) -> None:
        self._call({"op": "update", "name": name,
                    "tags": None if tags is None else list(tags), "config": config})

    def verdict(self) -> Verdict:
        return Verdict.from_dict(self._call({"op": "verdict"}))

    def final(self, state: RunState, now: float) -> Verdict:
        verdict = Verdict.from_dict(self._call({"op": "final", "state": state.value,
                                                "now": now}))
        self.close()
        return verdict

    def close(self) -> None:
        self._ender()

    # ---- the pipe ------------------------------------------------------------------
    def _call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self._collect()
        return self._answer(self._exchange(encode(request)))

    def _collect(self) -> None:
        """Read the answers owed to `send_rows`, kept for `take`."""
        while self._owed:
            self._ready.append(self._line())
            self._owed -= 1

    @staticmethod
    def _answer(line: bytes) -> dict[str, Any]:
        reply = decode(line)
        if "error" in reply:
            raise error_from_dict(reply["error"])
        return reply["ok"]  # type: ignore[no-any-return]

    def _exchange(self, request: bytes) -> bytes:
        """Send one request (nothing owed); its answer's line."""
        self._write(request)
        return self._line()

    def _write(self, request: bytes) -> None:
        proc = self._proc
        if proc.stdin is None or proc.stdin.closed:
            raise JudgeProcessError("the judge process was closed")
        try:  # straight to the pipe (its buffer is never left holding anything)
            view, fd = memoryview(request), proc.stdin.fileno()
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            raise self._gone("ended", with_code=True) from None
        except OSError as exc:
            raise self._gone(f"could not be written to ({exc})") from None

    def _line(self) -> bytes:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + self._timeout
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return line
            if len(self._buf) > MAX_LINE:
                raise self._gone(f"answered more than {MAX_LINE} bytes in one line")
            try:  # the answer is there most times: one system call, not a select first
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise self._gone(f"did not answer within {self._timeout:g} s") from None
                continue
            if not chunk:
                raise self._gone("ended", with_code=True)
            self._buf += chunk

    def _gone(self, what: str, *, with_code: bool = False) -> JudgeProcessError:
        self.close()  # reaps it: its exit code is known from here on
        code = f" (exit code {self._proc.returncode})" if with_code else ""
        return JudgeProcessError(
            f"the gate's judge process (pid {self._proc.pid}) {what}{code}; its standard "
            "error (the trainer's) says why")
