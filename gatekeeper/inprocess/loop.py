"""`GateLogger`: gate a custom training loop at its `log(dict)` call.

Loops that log through one function (miles' `log(args, log_dict, step_key)`, a
`wandb.log`, a hand-written `logger.log(metrics)`) get in-process gating by routing that
call through a `GateLogger`: the dict is forwarded first (so loggers record the bad point
too), then observed; `should_stop` (or `GateFailed`, under on_fail="raise") ends the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gatekeeper.inprocess.gate import Gate, Observation


class GateLogger:
    """A `log(metrics, step=None, ...)` callable that feeds a `Gate`.

    `forward`: the logger to call first with the same arguments (e.g. `wandb.log`).
    Metrics whose value is not one number (strings, histograms, images) are forwarded
    but not observed, as a metrics logger would keep them out of its charts.
    """

    def __init__(self, gate: Gate, forward: Callable[..., Any] | None = None):
        self.gate = gate
        self.forward = forward

    def __call__(self, metrics: Mapping[str, Any], *args: Any, **kwargs: Any) -> Observation:
        """Forward `(metrics, *args, **kwargs)` to `forward`, then observe `metrics` at
        `kwargs["step"]` (as `wandb.log(data, step=...)` takes it) or at the dict's own
        step fields."""
        if self.forward is not None:
            self.forward(metrics, *args, **kwargs)
        return self.log(metrics, kwargs.get("step"))

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> Observation:
        """Observe one logged dict; `step` on the gate's axis, or the dict's own step
        fields (`train/step`, `step`) when None."""
        from gatekeeper.inprocess.rows import is_scalar

        scalars = {k: v for k, v in metrics.items() if is_scalar(v)}
        return self.gate.observe(step, scalars)

    @property
    def should_stop(self) -> bool:
        """The gate's `should_stop`: end the loop."""
        return self.gate.should_stop
