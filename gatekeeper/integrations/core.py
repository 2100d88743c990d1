"""What every trainer callback does with its gate, whatever the framework: build it from
the callback's arguments, hand each step's metrics over, decide at each step boundary
whether to stop, and stop (or raise) when the gate failed.

Framework-free: each framework module (hf.py, lightning.py) maps its hooks onto these
and says how its trainer stops, which rank writes the reports and how ranks agree.

The boundary protocol (mode="async", the default): step N's metrics are handed over at
boundary N (`hand_over`); the judgement of step N is awaited before the collective of
step N+1 (`settle`, from a hook that runs before backward) or, failing that, at boundary
N+1; a failure found there stops the run at boundary N+1, every rank together: agreed
through `StopChannel` (a store key, no collective) when ranks judge different values.
Under mode="sync" each step is judged at its own boundary and the run stops there; with
several ranks judging their own values that costs one boolean all-reduce per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess.gate import Gate, GateFailed, Mode, OnFail, PolicyInput
from gatekeeper.model import RunState
from gatekeeper.verdict import Verdict

# logged names a callback keeps worked out (a run logs a few dozen; a bound all the same)
NAMES_KEPT = 4096


class GateCallback:
    """The framework-free half of a trainer callback; a framework's callback subclasses
    it and its framework's callback class, sets `axis`, and maps its hooks onto
    `hand_over`, `settle` and `boundary`.

    `policies`, `overrides`, `reports`, `on_fail`, `mode`: as for `gatekeeper.Gate`; or a
    ready `gate` (its mode is used). The gate itself only stops (or reports): raising is
    done here, after the reports are written."""

    axis: str  # the step axis the framework's loggers put the metrics on

    def __init__(
        self,
        policies: PolicyInput | None = None,
        *,
        gate: Gate | None = None,
        overrides: Sequence[str] = (),
        on_fail: OnFail | str = OnFail.STOP,
        mode: Mode | str = Mode.ASYNC,
        reports: ReportOptions | None = None,
        **gate_options: Any,
    ):
        if (gate is None) == (policies is None):
            raise TypeError("GatekeeperCallback needs policies or a gate (one of them)")
        self.on_fail = OnFail(on_fail)
        self.gate = gate or Gate(
            policies,  # type: ignore[arg-type]
            overrides=overrides,
            on_fail=OnFail.REPORT if self.on_fail is OnFail.REPORT else OnFail.STOP,
            mode=mode,
            reports=reports,
            axis=self.axis,
            **gate_options,
        )
        self.mode = self.gate.mode
        self.channel: Any = None  # a StopChannel when ranks judge different values
        self._boundary = 0  # step boundaries passed (the same count on every rank)
        self._pending = 0  # the last ticket handed over and not yet settled (0: none)
        self._stop_at: int | None = None  # the boundary this rank stops at
        self.is_zero = True  # global rank 0 (the framework module sets it)

    def hand_over(self, step: int, metrics: dict[str, Any], *, hold: bool = False) -> None:
        """Give the gate one step's (or one evaluation's) metrics, judged later; `hold`:
        the judge gets them at the next `release` (or settle)."""
        if metrics:
            self._pending = self.gate.submit(step, metrics, hold=hold)

    def release(self) -> None:
        """Let the judge start on what was handed over with `hold`."""
        self.gate.release()

    def settle(self, stop_at: int) -> None:
        """Wait for the judgement of everything handed over so far; when it failed the
        gate, this rank stops at boundary `stop_at` and tells the others."""
        if not self._pending:
            return
        try:
            stop = self.gate.wait(self._pending)
        except GateFailed:  # a caller's gate built with on_fail="raise"
            self.finish()
            raise
        self._pending = 0
        if stop and self._stop_at is None:
            self._stop_at = stop_at
            if self.channel is not None:
                self.channel.post(stop_at)

    def settle_before_collective(self) -> None:
        """From a hook inside step N+1 that runs before its collective (backward):
        a failure at step N stops every rank at boundary N+1."""
        if self.mode is Mode.ASYNC:
            self.settle(self._boundary + 1)

    def writes_reports(self) -> bool:
        """This rank writes the reports: the rank whose failure stopped the run when
        ranks judge their own values, else rank 0."""
        owner = self.channel.owner() if self.channel is not None else None
        return self.is_zero if owner is None else bool(owner == self.channel.rank)

    def finish(self, state: RunState | str = RunState.FINISHED) -> Verdict:
        """Judge everything handed over, the run as ended; one rank writes the reports."""
        return self.gate.finalize(state=state, write=self.writes_reports())

    def begin_boundary(self) -> int:
        """A step ended (one optimizer step, the same count on every rank)."""
        self._boundary += 1
        return self._boundary

    def settle_at_boundary(self) -> None:
        """Settle at the boundary itself: under mode="async" the previous steps (with
        other ranks to tell, they stop one step later: the collective has passed),
        under mode="sync" this step too."""
        if self.mode is Mode.ASYNC and self.channel is not None:
            self.settle(self._boundary + 1)
        else:
            self.settle(self._boundary)

    def boundary(
        self, step: int, metrics: dict[str, Any], *, stop_training: Callable[[], None],
        agree: Callable[[bool], bool] | None = None, hold: bool = False,
    ) -> None:
        """A whole step boundary: settle, hand this step over, decide (see `decide`).
        `hold` (mode="async"): the judge gets the values at the next `release` (a hook
        early in the next step, by when their device copy has landed)."""
        self.begin_boundary()
        if self.mode is Mode.ASYNC:
            self.settle_at_boundary()
            self.hand_over(step, metrics, hold=hold)
        else:
            self.hand_over(step, metrics)
            self.settle_at_boundary()
        self.decide(stop_training, agree)

    def decide(
        self, stop_training: Callable[[], None], agree: Callable[[bool], bool] | None = None
    ) -> None:
        """Stop here when this rank's stop or a posted one is due. `agree` (mode="sync"
        with ranks judging their own values) turns this rank's stop into the one all
        ranks take: an all-reduce, the price of stopping at the very step."""
        here = self._boundary
        stop = self._stop_at is not None and self._stop_at <= here
        if self.channel is not None and not stop and self.mode is Mode.ASYNC:
            stop = self.channel.due(here)
        if agree is not None and self.mode is Mode.SYNC:
            stop = agree(stop)
        if stop:
            stop_training()
            if self.on_fail is OnFail.RAISE and self.gate.failed:  # the rank that failed
                self.finish()
                raise GateFailed(self.gate.verdict())
