"""What every trainer callback does with its gate, whatever the framework: build it from
the callback's arguments, observe a step's metrics, and stop (or raise) when it fails.

Framework-free: each framework module (hf.py, lightning.py) maps its hooks onto these
and says how its trainer stops and which rank writes the reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess.gate import Gate, GateFailed, OnFail, PolicyInput


class GateCallback:
    """The framework-free half of a trainer callback; a framework's callback subclasses
    it and its framework's callback class, sets `axis`, and maps its hooks onto `judge`.

    `policies`, `overrides`, `reports`, `on_fail`: as for `gatekeeper.Gate`; or a ready
    `gate`. The gate itself only stops (or reports): raising is done here, after the
    reports are written."""

    axis: str  # the step axis the framework's loggers put the metrics on

    def __init__(
        self,
        policies: PolicyInput | None = None,
        *,
        gate: Gate | None = None,
        overrides: Sequence[str] = (),
        on_fail: OnFail | str = OnFail.STOP,
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
            reports=reports,
            axis=self.axis,
            **gate_options,
        )

    def judge(
        self,
        step: int,
        metrics: dict[str, Any],
        *,
        write: bool,
        stop_training: Callable[[], None],
        agree: Callable[[bool], bool] | None = None,
    ) -> None:
        """Judge `metrics` at `step`. When the gate fails: `stop_training()`, and under
        on_fail="raise" write the reports (`write`: this rank writes them) and raise
        GateFailed. `agree` turns this rank's stop into the one all ranks take."""
        try:
            stop = self.gate.observe(step, metrics).stop
        except GateFailed:  # a caller's gate built with on_fail="raise"
            self.gate.finalize(write=write)
            raise
        if agree is not None:
            stop = agree(stop)
        if stop:
            stop_training()
            if self.on_fail is OnFail.RAISE:
                self.gate.finalize(write=write)
                raise GateFailed(self.gate.verdict())
