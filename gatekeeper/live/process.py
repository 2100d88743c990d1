"""The watched command's processes: start CMD, forward signals, stop everything it started.

CMD runs in a new session (so its own process group): a Ctrl-C in gatekeeper's terminal
reaches only gatekeeper, which forwards it. A signal to the group reaches most of what
CMD started, but not processes that started their own session (Ray workers, daemons):
those are tracked through /proc (descendants.py). Stopping sends SIGTERM to CMD, lets
the rest (its logger) exit after it for a moment, then signals the group and every
tracked descendant (SIGTERM, then SIGKILL), so that nothing is left holding GPUs
seconds after the verdict.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from gatekeeper.errors import UsageError
from gatekeeper.live.descendants import MARK_ENV, NOTE_NO_PROC, Descendants, new_mark

FORWARDED = (signal.SIGINT, signal.SIGTERM)
_REAP_POLL = 0.05  # seconds between checks whether the group is gone
_SETTLE = 2.0  # s the rest may take to exit on its own once CMD has exited
_KILL_WAIT = 10.0  # SIGKILL cannot be ignored; this only bounds the wait for the kernel


class ChildGroup:
    """CMD started as the leader of its own process group."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None):
        if not argv:
            raise UsageError(
                "run: no command given; write it after --, e.g. run ... -- python train.py"
            )
        mark = new_mark()
        try:
            self.proc = subprocess.Popen(
                list(argv), env={**(env or os.environ), MARK_ENV: mark}, start_new_session=True
            )
        except OSError as exc:
            raise UsageError(f"run: cannot start {argv[0]!r}: {exc.strerror}") from None
        self.pgid = self.proc.pid  # a session leader's pgid is its pid
        self.forwarded: list[int] = []  # signals gatekeeper received and passed on
        self.sent_to: list[str] = []  # "CMD" or "group", "+N": N descendants outside it
        self.descendants = Descendants(self.proc.pid, mark)
        self.note = None if self.descendants.available else NOTE_NO_PROC

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` s for CMD itself to exit; True once it has."""
        try:
            self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return False
        return True

    def exit_code(self) -> int:
        """CMD's exit status as a shell reports it (killed by signal N: 128 + N)."""
        code = self.proc.wait()
        return 128 - code if code < 0 else code

    def killed_by(self) -> str | None:
        """The name of the signal that killed CMD (SIGKILL), None when it exited itself."""
        code = self.proc.wait()
        if code >= 0:
            return None
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"

    def signal(self, sig: int) -> bool:
        """Send `sig` to the whole group; False when no member is left."""
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member changed user; the rest still got it
            return True
        return True

    def group_alive(self) -> bool:
        self.proc.poll()  # reap CMD itself: a zombie leader still counts as a member
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def track(self) -> None:
        """Record CMD's descendants now (call on every poll: a daemon's ancestry is
        lost once its parent exits)."""
        self.descendants.record()

    def alive(self) -> bool:
        """Anything CMD started still running: its group or a tracked descendant."""
        self.track()
        return self.group_alive() or bool(self.descendants.alive())

    def wait_all(self, timeout: float) -> bool:
        """Wait up to `timeout` s for CMD, its group and its descendants to exit."""
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_REAP_POLL)
        return True

    def stop(self, grace: float, on_signal: Callable[[int], None] | None = None) -> int | None:
        """Stop everything CMD started within about `grace` + 2 s, the trainer first:
        SIGTERM to CMD alone; once it has exited (or the grace is up), the rest may exit
        on its own for at most _SETTLE s (the logger: wandb-core, in its own session,
        flushes what it was handed once its parent is gone; data-loader workers exit
        with their parent); then SIGTERM to the group and to every tracked descendant
        outside it (Ray workers: own sessions), and SIGKILL to what is left. Signalling
        all first would stop the logger while the trainer unwinds and lose the run's
        tail. Returns the last signal sent (None when all was already gone)."""
        deadline = time.monotonic() + grace
        sent: int | None = None
        if self.alive():
            if self.proc.poll() is None:
                sent = self._send(signal.SIGTERM, on_signal, group=False)
                self.wait(deadline - time.monotonic())
            settle = min(deadline, time.monotonic() + _SETTLE)
            self.wait_all(settle - time.monotonic())
        for sig, wait in ((signal.SIGTERM, min(grace, 2.0)), (signal.SIGKILL, _KILL_WAIT)):
            if not self.alive():
                break
            sent = self._send(sig, on_signal, group=True)
            if self.wait_all(wait):
                break
        self.proc.poll()
        return sent

    def _send(self, sig: int, on_signal: Callable[[int], None] | None, *, group: bool) -> int:
        """`sig` to CMD alone, or to the group and the tracked descendants outside it."""
        if on_signal is not None:
            on_signal(sig)
        if not group:
            self.sent_to.append("CMD")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            return sig
        self.signal(sig)
        outside = [pid for pid in self.descendants.alive() if _pgid(pid) != self.pgid]
        reached = self.descendants.signal(sig, only=outside)
        self.sent_to.append(f"group+{len(reached)}" if reached else "group")
        return sig


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Forwarding:
    """While active, SIGINT/SIGTERM sent to gatekeeper go to the child group instead.
    Entered before CMD starts (`attach` gives it the group once started): a signal that
    arrives in between is kept and forwarded at `attach`, never taken as gatekeeper's own
    (a KeyboardInterrupt that left the report unwritten)."""

    def __init__(self, on_forward: Callable[[int], None] | None = None):
        self.group: ChildGroup | None = None
        self.on_forward = on_forward
        self._saved: dict[int, object] = {}
        self._early: list[int] = []  # signals received before the group existed

    def attach(self, group: ChildGroup) -> ChildGroup:
        self.group = group
        early, self._early = self._early, []
        for signum in early:
            self._forward(signum)
        return group

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.group is None:
            self._early.append(signum)
        else:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        assert self.group is not None
        self.group.forwarded.append(signum)
        self.group.signal(signum)
        if self.on_forward is not None:
            self.on_forward(signum)

    def __enter__(self) -> Forwarding:
        for sig in FORWARDED:
            self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
