"""The watched command's process group: start it, forward signals, stop it in two steps.

CMD runs in a new session (so its own process group): a signal to the group reaches
every process it started, and a Ctrl-C in gatekeeper's terminal reaches only
gatekeeper, which forwards it. Stopping sends SIGTERM to CMD alone, lets the rest of the
group (its logger, data-loader workers) exit after it within the grace period, then
signals the group (SIGTERM, then SIGKILL) so that nothing is left holding GPUs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from gatekeeper.errors import UsageError

FORWARDED = (signal.SIGINT, signal.SIGTERM)
_REAP_POLL = 0.05  # seconds between checks whether the group is gone


class ChildGroup:
    """CMD started as the leader of its own process group."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None):
        if not argv:
            raise UsageError(
                "run: no command given; write it after --, e.g. run ... -- python train.py"
            )
        try:
            self.proc = subprocess.Popen(
                list(argv), env=dict(env) if env else None, start_new_session=True
            )
        except OSError as exc:
            raise UsageError(f"run: cannot start {argv[0]!r}: {exc.strerror}") from None
        self.pgid = self.proc.pid  # a session leader's pgid is its pid
        self.forwarded: list[int] = []  # signals gatekeeper received and passed on
        self.sent_to: list[str] = []  # "CMD" or "group", per signal `stop` sent, in order

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

    def wait_group(self, timeout: float) -> bool:
        """Wait up to `timeout` s for every member of the group to exit."""
        deadline = time.monotonic() + timeout
        while self.group_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_REAP_POLL)
        return True

    def stop(self, grace: float, on_signal: Callable[[int], None] | None = None) -> int | None:
        """Stop the group within `grace` s, the trainer first: SIGTERM to CMD alone, then
        the rest of the group (the logger: wandb-core flushes what it was handed once its
        parent is gone; data-loader workers exit with their parent) may exit on its own
        until the grace is up; then SIGTERM to the group, and SIGKILL to what is left. A
        group signal first would stop the logger with the trainer. Returns the last
        signal sent (None when the group was already gone)."""
        deadline = time.monotonic() + grace
        sent: int | None = None
        if self.proc.poll() is None:
            sent = self._send(signal.SIGTERM, on_signal, group=False)
            self.wait(deadline - time.monotonic())
            self.wait_group(deadline - time.monotonic())
        for sig, wait in ((signal.SIGTERM, min(grace, 2.0)), (signal.SIGKILL, 10.0)):
            if not self.group_alive():
                break
            sent = self._send(sig, on_signal, group=True)
            if self.wait_group(max(wait, deadline - time.monotonic())):
                break
        self.proc.poll()
        return sent

    def _send(self, sig: int, on_signal: Callable[[int], None] | None, *, group: bool) -> int:
        if on_signal is not None:
            on_signal(sig)
        self.sent_to.append("group" if group else "CMD")
        if group:
            self.signal(sig)
        else:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
        return sig


class Forwarding:
    """While active, SIGINT/SIGTERM sent to gatekeeper go to the child group instead."""

    def __init__(self, group: ChildGroup, on_forward: Callable[[int], None] | None = None):
        self.group = group
        self.on_forward = on_forward
        self._saved: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
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
