"""What `watch` and `run` print while following a run: one line per status change, and a
progress line (steps seen per metric, rules passing/pending/failing).

On a terminal the progress line is redrawn in place every poll; in a CI log (not a
terminal) it is printed as its own line at most every `progress_every` seconds and only
when something new arrived, so a multi-day run does not flood the log.
"""

from __future__ import annotations

import sys
from typing import TextIO

from gatekeeper.live.gate import Change, Progress, Tick
from gatekeeper.report.text import step_text, value_text
from gatekeeper.verdict import Status

_MAX_METRICS_SHOWN = 4


def change_line(change: Change, elapsed: float) -> str:
    r = change.result
    before = change.before.value if change.before is not None else "new"
    where = f" at {step_text(r)}" if r.step is not None else ""
    value = f" = {value_text(r)}" if r.value is not None else ""
    return (
        f"[{elapsed:7.1f}s] {r.policy}/{r.rule}: {before} -> {r.status.value.upper()}"
        f"  {r.metric}{where}{value}: {r.message}"
    )


def progress_line(progress: Progress, counts: dict[str, int], elapsed: float) -> str:
    names = sorted(progress.points, key=lambda m: (-progress.points[m], m))
    shown = [f"{m} {progress.axis[m]} {progress.last_step[m]}" for m in names[:_MAX_METRICS_SHOWN]]
    if len(names) > _MAX_METRICS_SHOWN:
        shown.append(f"+{len(names) - _MAX_METRICS_SHOWN} metrics")
    steps = ", ".join(shown) or "no points yet"
    failing = counts.get("fail", 0) + counts.get("error", 0)
    return (
        f"[{elapsed:7.1f}s] {progress.total} points ({steps}) | rules: {counts.get('pass', 0)} "
        f"passing, {counts.get('warn', 0)} warning, {counts.get('pending', 0)} pending, "
        f"{failing} failing"
    )


class Printer:
    """Prints status changes as they happen and the progress line."""

    def __init__(
        self, stream: TextIO | None = None, *, progress_every: float = 30.0, quiet: bool = False
    ):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.progress_every = progress_every
        self.quiet = quiet
        self._last_progress: float | None = None
        self._drawn = False  # a progress line is on screen without its newline

    def say(self, text: str) -> None:
        if self._drawn:
            self.stream.write("\n")
            self._drawn = False
        print(text, file=self.stream, flush=True)

    def tick(self, tick: Tick, progress: Progress, elapsed: float) -> None:
        if self.quiet:
            return
        for change in tick.changes:
            # Rules starting out pending are the normal state of a fresh run: not news.
            if change.before is None and change.result.status is Status.PENDING:
                continue
            self.say(change_line(change, elapsed))
        line = progress_line(progress, tick.verdict.counts(), elapsed)
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
            self._drawn = True
        elif tick.points and (
            self._last_progress is None or elapsed - self._last_progress >= self.progress_every
        ):
            self.say(line)
            self._last_progress = elapsed

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
