"""`Gate`: the policies of `gatekeeper check`, judged inside the training process.

Load policies once, `observe()` each step's metrics (or a batch of rows), and the gate
says at once when a rule fails: no file, no logger flush, no poll interval between the
bad step and the decision. The judging is the live engine's (`LiveGate` over an
in-memory source, `local.py`), so verdicts and messages are those of `watch`, `run` and
`check`; an asynchronous gate runs it in a judge process (`remote.py`, `judge.py`).
"""

from __future__ import annotations

import enum
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

from gatekeeper.errors import UsageError
from gatekeeper.gate import PolicyInput, ReportOptions, resolve_policies, write_reports
from gatekeeper.inprocess.handoff import Handoff
from gatekeeper.inprocess.local import Judged, LocalJudge
from gatekeeper.inprocess.remote import RemoteJudge
from gatekeeper.live.gate import Change
from gatekeeper.live.progress import change_line
from gatekeeper.model import Run, RunState
from gatekeeper.verdict import GateStatus, RuleResult, Status, Verdict


class OnFail(str, enum.Enum):
    """What `observe` does when the gate fails (an enforce-mode, fail-severity rule is
    `fail` or `error`)."""

    RAISE = "raise"  # raise GateFailed from the observe call that saw it fail
    STOP = "stop"  # return Observation.stop = True; the caller stops its loop
    REPORT = "report"  # only report: the run goes on, the final verdict still fails


class Mode(str, enum.Enum):
    """How `submit`/`feed` hand values to the judge (`observe` always judges at once)."""

    ASYNC = "async"  # judged off the training thread; the stop takes effect one step later
    SYNC = "sync"  # judged on the caller's thread, inside the call: stops at the very step


class GateFailed(Exception):
    """Raised by `observe` under `on_fail="raise"`: the gate failed at this step.

    Not a `GatekeeperError` (those mean "could not evaluate", exit 2): a failing gate
    is a result, carried in `verdict`; `exit_code` is 1, as for `gatekeeper check`.
    """

    exit_code = 1

    def __init__(self, verdict: Verdict):
        self.verdict = verdict
        first = verdict.failing()[0]
        super().__init__(f"gate failed: {first.policy}/{first.rule}: {first.message}")


@dataclass(frozen=True)
class Observation:
    """What one `observe` call concluded: the live gate `status`, the rules whose
    status `changes`d, the `failing` rules, `stop` (the gate failed and on_fail is not
    "report": end the loop) and how many `points` the call added."""

    status: GateStatus  # pass | pending | fail | error, judged live
    changes: list[Change] = field(default_factory=list)  # rules whose status changed
    failing: list[RuleResult] = field(default_factory=list)  # the rules failing the gate
    stop: bool = False  # the gate failed and on_fail is "stop" (or "raise"): stop the run
    points: int = 0  # points this call added


def policy_paths(policies: PolicyInput) -> list[str] | None:
    """The policies as absolute paths, or None when they are loaded `PolicySpec`s."""
    items = [policies] if isinstance(policies, (str, os.PathLike)) else list(policies)
    if all(isinstance(p, (str, os.PathLike)) for p in items):
        return [os.path.abspath(os.fspath(p)) for p in items]  # type: ignore[arg-type]
    return None


class _WeakGate:
    """What the hand-over calls on its gate, holding it weakly (a gone gate stops its
    worker): `judge` (a judge in this process) or `send`/`take` (`handoff.Pipe`, to a
    judge process)."""

    def __init__(self, gate: Gate):
        self._ref = weakref.ref(gate)

    def judge(self, step: int | None, metrics: dict[str, Any]) -> bool:
        alive = self._ref()
        return True if alive is None else alive._judge_handed(step, metrics)

    def send(self, step: int | None, metrics: dict[str, Any]) -> None:
        alive = self._ref()
        if alive is not None:
            alive._send_handed(step, metrics)

    def take(self) -> bool:
        alive = self._ref()
        return True if alive is None else alive._take_handed()


def make_judge(policies: PolicyInput, overrides: Sequence[str], run: Run, axis: str,
               started: float, *, threaded: bool) -> LocalJudge | RemoteJudge:
    """Where a gate judges: in a judge process (an asynchronous gate given policy files:
    judging then never holds the trainer's GIL), or in this process (mode="sync",
    `judge="thread"`, or loaded `PolicySpec`s, which are not handed to a process)."""
    paths = policy_paths(policies)
    if not threaded and paths is not None:
        return RemoteJudge(paths, overrides, run, axis, started)
    return LocalJudge(run, resolve_policies(policies, overrides), axis, started)


class Gate:
    """Judge one run in-process. Thread-safe: a logger thread may observe while the
    training thread asks `should_stop`.

    - `policies`: policy files/directories (as `-p`) or already loaded `PolicySpec`s;
      errors are raised here (`PolicyError`), before the first training step.
    - `overrides`: `POLICY/RULE=ACTION:REASON` strings, as `--override`.
    - `axis`: the step axis of metrics that name none (`observe(step, ...)`); rows may
      carry their own (`train/step`, `rollout/step`), as in JSONL.
    - `on_fail`: "stop" (default), "raise" or "report"; see `OnFail`.
    - `mode`: how `submit`/`feed` judge: "async" (default: the values are sent to the
      judge and its answer read a step later, the stop one step after the violation) or
      "sync" (on the caller's thread, at the very step); see
      `gatekeeper.inprocess.handoff`. `observe` always judges at once (in the judge
      process, when there is one).
    - `judge`: where an async gate judges: "process" (default: a child process,
      `gatekeeper.inprocess.judge`, so judging never competes with the training thread
      for the GIL; the training thread writes to it and reads its answers, a sender
      thread only sends device values whose copy has not landed) or "thread" (a worker
      thread of this process waits for the device and judges). A sync gate, and one
      given loaded `PolicySpec`s, judge in this process.
    - `reports`: what `finalize()` writes (JSON, JUnit, GitHub), as `check` does; the
      console table only when asked (`ReportOptions(quiet=False)`); `echo`: where
      status changes are printed as they happen (True: standard error, a stream, or
      False/None: off).
    """

    def __init__(
        self,
        policies: PolicyInput,
        *,
        overrides: Sequence[str] = (),
        name: str = "run",
        tags: Iterable[str] = (),
        config: Mapping[str, Any] | None = None,
        axis: str = "step",
        on_fail: OnFail | str = OnFail.STOP,
        mode: Mode | str = Mode.ASYNC,
        reports: ReportOptions | None = None,
        echo: TextIO | bool | None = True,
        clock: Callable[[], float] = time.time,
        judge: str = "process",
    ):
        self.on_fail = OnFail(on_fail)
        self.reports = reports if reports is not None else ReportOptions()
        self.echo = echo
        self._clock = clock
        self._lock = threading.RLock()
        run = Run(name=name, source=f"in-process:{os.getpid()}", tags=tuple(tags),
                  config=dict(config or {}), state=RunState.RUNNING)
        self._started = clock()
        self.mode = Mode(mode)
        self.axis = axis
        if judge not in ("process", "thread"):
            raise UsageError(f'judge must be "process" or "thread", got {judge!r}')
        self._judge = make_judge(policies, overrides, run, axis, self._started,
                                 threaded=self.mode is Mode.SYNC or judge == "thread")
        self._failed_at: dict[str, Any] | None = None
        self._final: Verdict | None = None
        piped = self.mode is Mode.ASYNC and isinstance(self._judge, RemoteJudge)
        weak = _WeakGate(self)
        self._handoff = Handoff(weak.judge, threaded=self.mode is Mode.ASYNC,
                                pipe=weak if piped else None)
        # A gate dropped without finalize ends its worker and (its judge gone with it)
        # its judge process: the worker holds the gate only weakly.
        weakref.finalize(self, self._handoff.abandon)
        self._fed = 0  # the ticket of the previous `feed`

    # ---- feeding -----------------------------------------------------------------------
    def observe(self, step: int | None, metrics: Mapping[str, Any]) -> Observation:
        """Judge one step's metrics. `step` is on the gate's axis; None: the metrics
        carry their steps (`{"train/step": 3, "train/loss": 0.4}`). A None or NaN value
        is a non-finite point: an error at once, never skipped."""
        return self.observe_rows([self._row(step, metrics)])

    def submit(self, step: int | None, metrics: Mapping[str, Any], *, hold: bool = False) -> int:
        """Hand one step's metrics to the judge without waiting for it (under
        mode="sync", judged now): device tensors are copied without a sync and read once
        the copy landed. Returns a ticket for `wait`. Blocks only while the judge is
        `depth` hand-overs behind; raises here what the judging raised since the last
        call. `hold=True` (mode="async"): the values are taken now but the judge gets
        them at the next `release()` or `wait()` — call `release()` once the next step's
        device work is queued, so sending them overlaps it."""
        return self._handoff.submit(step, metrics, hold=hold)

    def release(self) -> None:
        """Give the judge what `submit(..., hold=True)` kept back."""
        self._handoff.release()

    def wait(self, ticket: int) -> bool:
        """Block until the hand-over `ticket` (and every one before it) is judged; True
        when the gate stopped on one of them (never under on_fail="report")."""
        return self._handoff.wait(ticket)

    def feed(self, step: int | None, metrics: Mapping[str, Any]) -> bool:
        """One step of a training loop: hand the metrics over and say whether to stop
        now. Under mode="async" the answer covers the steps before this one (a violation
        at step K stops the loop after step K+1: the judging of K overlaps step K+1);
        under mode="sync" it covers this step too (stops after step K)."""
        ticket = self.submit(step, metrics)
        previous, self._fed = self._fed, ticket
        return self.wait(ticket if self.mode is Mode.SYNC else previous)

    def _judge_handed(self, step: int | None, metrics: dict[str, Any]) -> bool:
        return self.observe(step, metrics).stop

    def _send_handed(self, step: int | None, metrics: dict[str, Any]) -> None:
        """A hand-over sent to the judge process; `_take_handed` concludes it."""
        with self._lock:
            self._open()
            assert isinstance(self._judge, RemoteJudge)
            # once failed, a step's failing rules change nothing here: not sent again
            self._judge.send_rows([self._row(step, metrics)], self._clock(),
                                  failing=self._failed_at is None)

    def _take_handed(self) -> bool:
        with self._lock:
            assert isinstance(self._judge, RemoteJudge)
            obs, newly = self._conclude(self._judge.take())
        if newly and self.on_fail is OnFail.RAISE:
            raise GateFailed(self.verdict())
        return obs.stop

    def observe_rows(self, rows: Iterable[Mapping[str, Any]]) -> Observation:
        """Judge a batch of rows (each as in JSONL: step fields plus metrics) at once.
        Steps of a metric must not go back; a rejected row raises `UsageError` (the rows
        before it are kept and judged with the next call)."""
        with self._lock:
            self._open()
            obs, newly = self._conclude(self._judge.observe_rows(rows, self._clock()))
        if newly and self.on_fail is OnFail.RAISE:
            raise GateFailed(self.verdict())
        return obs

    def _row(self, step: int | None, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """One step's metrics as a row: on the gate's axis, or carrying their steps."""
        return dict(metrics) if step is None else {self.axis: step, **metrics}

    def _open(self) -> None:
        if self._final is not None:
            raise UsageError("this gate was finalized; start a new Gate for a new run")

    def _conclude(self, judged: Judged) -> tuple[Observation, bool]:
        """A judgement as the caller sees it, and whether the gate failed just now."""
        self._say(judged.changes)
        newly = bool(judged.failing) and self._failed_at is None
        if newly:
            self._failed_at = self._failure_info(judged.failing[0])
        obs = Observation(
            status=judged.status,
            changes=judged.changes,
            failing=judged.failing,
            stop=self._failed_at is not None and self.on_fail is not OnFail.REPORT,
            points=judged.points,
        )
        return obs, newly

    def update_run(
        self,
        *,
        name: str | None = None,
        tags: Iterable[str] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """Set run metadata known only once training starts (`when:`/`match:` read it)."""
        with self._lock:
            self._judge.update_run(name, tags, config)

    # ---- asking ------------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        """True once the gate failed, unless on_fail is "report"."""
        with self._lock:
            return self._failed_at is not None and self.on_fail is not OnFail.REPORT

    @property
    def failed(self) -> bool:
        """True once the gate failed (whatever on_fail says)."""
        with self._lock:
            return self._failed_at is not None

    def verdict(self) -> Verdict:
        """The verdict on everything observed so far (live: missing data is pending),
        or the final verdict once finalized."""
        with self._lock:
            return self._final if self._final is not None else self._judge.verdict()

    # ---- ending ------------------------------------------------------------------------
    def finalize(
        self, *, state: RunState | str = RunState.FINISHED, stopped: bool | None = None,
        write: bool = True,
    ) -> Verdict:
        """Judge the run as ended (pending becomes error, exactly as `check` judges the
        same points) and write the reports (`write=False`: none; nothing is printed on
        stdout unless the reports ask for the table or GitHub annotations). `stopped`:
        the run was cut short because the gate failed (default: it failed and on_fail is
        not "report"); the reports then say at which step and why. Idempotent: later
        calls return the same verdict. Everything handed to `submit` is judged first."""
        raised: GateFailed | None = None
        try:
            self._handoff.drain()
        except GateFailed as exc:  # on_fail="raise", not yet surfaced: after the reports
            raised = exc
        with self._lock:
            if self._final is not None:
                return self._final
            verdict = self._judge.final(RunState(state), self._clock())
            cut = self.should_stop if stopped is None else stopped
            if cut and self._failed_at is not None:
                verdict.stopped = dict(self._failed_at)
            self._final = verdict
        if write:
            write_reports(verdict, self.reports, sys.stdout)
        if raised is not None:
            raise raised
        return verdict

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        crashed = exc_type is not None and not issubclass(exc_type, GateFailed)
        self.finalize(state=RunState.CRASHED if crashed else RunState.FINISHED)

    # ---- helpers -----------------------------------------------------------------------
    def _say(self, changes: list[Change]) -> None:
        if self.echo is None or isinstance(self.echo, bool):
            if not self.echo:
                return
            stream: TextIO = sys.stderr
        else:
            stream = self.echo
        elapsed = self._clock() - self._started
        for change in changes:
            # Rules starting out pending are the normal state of a fresh run: not news.
            if change.before is None and change.result.status is Status.PENDING:
                continue
            print(change_line(change, elapsed), file=stream, flush=True)

    def _failure_info(self, r: RuleResult) -> dict[str, Any]:
        """When and why the gate failed, in the shape `gatekeeper run` reports."""
        now = self._clock()
        value = r.value if r.value is None or r.value == r.value else "NaN"
        return {
            "reason": "gate failed",
            "rule": f"{r.policy}/{r.rule}",
            "metric": r.metric,
            "step": r.step,
            "step_key": r.step_key,
            "value": value,
            "message": r.message,
            "time": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "unix_time": round(now, 3),
            "elapsed_seconds": round(now - self._started, 1),
            "pid": os.getpid(),
            "signals": [],
            "exit_code": None,
        }
