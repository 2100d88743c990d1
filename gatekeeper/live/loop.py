"""The poll loop of `gatekeeper watch` and `gatekeeper run`.

Every `interval` seconds: poll the source, judge, print what changed. It ends at the
first gating failure (stopping the child group, if there is one), when the run ends (end
marker or final state; for `run`, when CMD exits), or after `idle_timeout` seconds
without a new point. Source errors that may heal (a file briefly unreadable) are retried
a few polls; a malformed record is final: nothing half-read is judged as whole.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gatekeeper.errors import RecordError, SourceError
from gatekeeper.live.gate import LiveGate, Tick
from gatekeeper.live.process import ChildGroup
from gatekeeper.live.progress import Printer
from gatekeeper.verdict import Verdict

DEFAULT_INTERVAL = 1.0
DEFAULT_GRACE = 5.0  # s from SIGTERM to SIGKILL: the verdict must free the GPUs soon
SOURCE_RETRIES = 3  # consecutive failed polls before a source error ends the watch


@dataclass(frozen=True)
class LoopSettings:
    interval: float = DEFAULT_INTERVAL
    idle_timeout: float | None = None
    grace: float = DEFAULT_GRACE


@dataclass
class Outcome:
    """How following the run ended, the verdict to report, and the exit code."""

    verdict: Verdict
    reason: str  # failed | ended | exited | idle | interrupted
    exit_code: int


class Follower:
    """Follows one run (and, for `run`, its command's process group) to an outcome."""

    def __init__(
        self,
        gate: LiveGate,
        settings: LoopSettings,
        printer: Printer,
        child: ChildGroup | None = None,
    ):
        self.gate, self.settings, self.printer, self.child = gate, settings, printer, child
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.forwarded_at: float | None = None  # when a SIGINT/SIGTERM was passed to the child
        self._errors = 0
        # while it returns True the run is not judged yet (`run --miles`: the trainer's
        # config is not known); called once a poll, before the source is read
        self.hold: Callable[[], bool] | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def on_forward(self, signum: int) -> None:
        self.forwarded_at = self.forwarded_at or time.monotonic()

    def run(self) -> Outcome:
        exited = False
        while True:
            now = time.time()
            held = self.hold is not None and self.hold()
            tick = None if held else self._poll(now)
            if tick is not None:
                self.printer.tick(tick, self.gate.progress, self.elapsed())
                # Once CMD has exited (or the record ended under `run`), the final
                # verdict decides, and there is nothing left to stop.
                if tick.verdict.failing() and not exited and not (tick.ended and self.child):
                    return self._failed(tick.verdict, now)
                if tick.ended and self.child is None:
                    return Outcome(tick.verdict, "ended", tick.verdict.exit_code)
                if exited:  # this poll read what CMD last wrote: the final verdict
                    return self._exited(now)
            idle = self.settings.idle_timeout
            if not exited and idle is not None and now - self.gate.last_activity >= idle:
                return self._idle(now)
            exited = self._sleep(exited)

    # ---- one poll ---------------------------------------------------------------------
    def _poll(self, now: float) -> Tick | None:
        try:
            tick = self.gate.poll(now)
        except RecordError:
            raise
        except SourceError as exc:
            self._errors += 1
            if self._errors >= SOURCE_RETRIES:
                raise
            self.printer.say(f"gatekeeper: warning: poll failed ({exc}); retrying")
            return None
        self._errors = 0
        return tick

    def _sleep(self, exited: bool) -> bool:
        """Wait one interval (waking early when CMD exits); True once CMD has exited.
        After the exit, only a failed poll brings us here: it is retried an interval
        later (SOURCE_RETRIES in a row end the watch), never judged without CMD's last
        points (they could hold the failure: a silent pass)."""
        if self.child is None or exited:
            time.sleep(self.settings.interval)
            return exited
        self.child.track()  # before a daemon's parent exits and its ancestry is lost
        if self.forwarded_at is not None and not self.child.exited():
            if time.monotonic() - self.forwarded_at >= self.settings.grace:
                self.printer.say("gatekeeper: command ignored the forwarded signal; SIGKILL")
                self.child.signal(signal.SIGKILL)
        return self.child.wait(self.settings.interval)

    # ---- endings ----------------------------------------------------------------------
    def _failed(self, verdict: Verdict, now: float) -> Outcome:
        first = verdict.failing()[0]
        if self.child is not None:
            self.printer.say(
                f"gatekeeper: {first.policy}/{first.rule} failed; stopping the command "
                f"(SIGTERM to pid {self.child.pid}, then to process group {self.child.pgid} "
                f"and the processes it started in their own sessions; SIGKILL after "
                f"{self.settings.grace:g} s)"
            )
            if self.child.note:
                self.printer.say(self.child.note)
            info = self._stopped(now, first.policy + "/" + first.rule, verdict)
            sent: list[str] = []
            sent_at: dict[str, float] = {}

            def on_signal(sig: int) -> None:
                sent.append(signal.Signals(sig).name)
                sent_at.setdefault(signal.Signals(sig).name, round(time.time(), 3))  # the first

            self.child.stop(self.settings.grace, on_signal=on_signal)
            info["signals"] = sent
            info["signal_targets"] = list(self.child.sent_to)  # CMD, then group; +N outside
            info["signal_unix_times"] = sent_at  # when each was sent (detection latency)
            info["exit_code"] = self.child.exit_code()
            verdict.run["command_exit_code"] = info["exit_code"]
            verdict.stopped = info
        return Outcome(verdict, "failed", 1)

    def _exited(self, now: float) -> Outcome:
        """CMD exited and its last points are read: the final verdict (a run interrupted
        by a forwarded signal is judged live: it was cut short, not finished)."""
        assert self.child is not None
        code = self.child.exit_code()
        if self.child.alive():  # CMD left workers behind (they may hold GPUs)
            self.printer.say(
                "gatekeeper: command exited; stopping what it left running "
                f"(process group {self.child.pgid} and processes that left it)"
            )
            self.child.stop(self.settings.grace)
        interrupted = bool(self.child.forwarded)
        verdict = self.gate.judge(now, final=not interrupted)
        verdict.run["command_exit_code"] = code
        signal_name = self.child.killed_by()
        if signal_name is not None:
            verdict.run["command_signal"] = signal_name
        if code != 0 and self.gate.progress.total == 0 and not interrupted:
            # CMD died before logging anything: its own failure, not a gate verdict
            self.printer.say(
                f"gatekeeper: command exited with code {code} before logging any metric; "
                f"exiting with its code"
            )
            return Outcome(verdict, "exited", code)
        if interrupted:
            name = signal.Signals(self.child.forwarded[0]).name
            verdict.stopped = self._stopped(
                now, None, verdict, reason=f"{name} forwarded to the command"
            )
            verdict.stopped["exit_code"] = code
        return Outcome(
            verdict, "interrupted" if interrupted else "exited", _exit_code(verdict, code)
        )

    def _idle(self, now: float) -> Outcome:
        secs = self.settings.idle_timeout
        self.printer.say(
            f"gatekeeper: no new point for {secs:g} s (--idle-timeout): the run has ended"
        )
        if self.child is None:
            verdict = self.gate.judge(now, final=True)
            return Outcome(verdict, "idle", verdict.exit_code)
        info = self._stopped(
            now, None, None, reason=f"no new point for {secs:g} s (--idle-timeout)"
        )
        self.child.stop(self.settings.grace)
        verdict = self.gate.judge(now, final=True)
        info["exit_code"] = code = self.child.exit_code()
        verdict.stopped = info
        return Outcome(verdict, "idle", _exit_code(verdict, code))

    def interrupted(self) -> Outcome:
        """`watch` got Ctrl-C: report what is known so far, judged live."""
        verdict = self.gate.judge(time.time(), final=False)
        return Outcome(verdict, "interrupted", 130)

    def _stopped(
        self, now: float, rule: str | None, verdict: Verdict | None, *, reason: str = "gate failed"
    ) -> dict[str, Any]:
        """When and why the run was stopped, for every report."""
        info: dict[str, Any] = {
            "reason": reason,
            "rule": rule,
            "time": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "unix_time": round(now, 3),
            "elapsed_seconds": round(now - self.started_wall, 1),
            "pid": self.child.pid if self.child else None,
            "step": None,
            "step_key": None,
            "metric": None,
            "value": None,
        }
        failing = [
            r for r in (verdict.failing() if verdict else []) if f"{r.policy}/{r.rule}" == rule
        ]
        if failing:
            r = failing[0]
            value = r.value if r.value is None or r.value == r.value else "NaN"
            info.update(
                step=r.step, step_key=r.step_key, metric=r.metric, value=value, message=r.message
            )
        info.update(self._last_seen(info["metric"]))
        return info

    def _last_seen(self, metric: str | None) -> dict[str, Any]:
        """How far the run had got (the violating step may be long behind it): the last
        step of the failing metric, else of the metric with the most points."""
        progress = self.gate.progress
        if metric not in progress.last_step:
            metric = max(progress.points, key=lambda m: progress.points[m], default=None)
        if metric is None:
            return {"last_step": None, "last_step_key": None}
        return {"last_step": progress.last_step[metric], "last_step_key": progress.axis[metric]}


def _exit_code(verdict: Verdict, command_code: int) -> int:
    """`run`'s exit code once CMD has exited: 1 when the gate failed; else CMD's own code
    when it failed; else the verdict's (0, or 5 when nothing was judged)."""
    if verdict.failing():
        return 1
    return command_code or verdict.exit_code
