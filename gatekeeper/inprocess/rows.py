"""Turn what a training loop logs (rows of `{metric: value}` at a step) into series.

The row rules are those of the JSONL reader, so a row observed in-process and the same
row written to a JSONL file land on the same metric, step axis and value:

- a metric `ns/x` is on `ns/step` when the row has it (`perf/*`: `rollout/step`), else on
  the gate's default axis (`step` unless the caller names another), else `step`/`_step`;
- a value is a number (bools count as 0/1), a 0-d array or tensor (`.item()`), `None`
  (a null: a non-finite point, never skipped) or a non-finite marker string ("NaN").

Only points not yet fed are kept (`take()` hands them over), so memory does not grow
with the length of the run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gatekeeper.errors import UsageError
from gatekeeper.model import STEP_DTYPE, STEP_MAX, STEP_MIN, VALUE_DTYPE, Run, Series
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.sources.jsonl.reader import DEFAULT_STEP_ALIASES, is_step_key

_MARKERS = {"nan": math.nan, "inf": math.inf, "infinity": math.inf, "+inf": math.inf,
            "-inf": -math.inf, "-infinity": -math.inf}


# A logged value of exactly one of these types is taken as it is, with no probe of its
# attributes (a tensor, a numpy scalar or a subclass is looked at further)
PLAIN_TYPES = frozenset({float, int, bool, str, type(None)})


def is_scalar(value: Any) -> bool:
    """True for what `to_float` accepts as one number: what trainer callbacks forward.
    (Called on every logged value of every step: the common types are tested first,
    before the abstract `Mapping`, whose isinstance is the slow one.)"""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    numel = getattr(value, "numel", None)
    if callable(numel):  # torch.Tensor: size is a method
        return bool(numel() == 1) and hasattr(value, "item")
    if isinstance(value, (str, bytes, Mapping, list, tuple)):
        return False
    size = getattr(value, "size", None)
    if size is not None and not callable(size):
        return bool(size == 1) and hasattr(value, "item")
    return hasattr(value, "__float__")


def to_float(metric: str, value: Any) -> float:
    """One logged value as a float; a null is NaN (judged as a non-finite point)."""
    if value is None:
        return math.nan
    if isinstance(value, str):
        marker = _MARKERS.get(value.strip().lower())
        if marker is None:
            raise UsageError(
                f"metric {metric!r}: expected a number, got the string {value!r} "
                '(only "NaN", "Infinity" and "-Infinity" are read as numbers)'
            )
        return marker
    if not is_scalar(value):
        raise UsageError(f"metric {metric!r}: expected a number, got {type(value).__name__}")
    item = getattr(value, "item", None)
    try:
        return float(item() if callable(item) else value)
    except OverflowError:  # an int past float64's range: the JSONL reader refuses it too
        raise UsageError(
            f"metric {metric!r}: {value!r:.40} is out of the range of a float64"
        ) from None


def metric_name(key: Any) -> str:
    """A row's key as a metric name: a string (as JSON keys are), else a UsageError."""
    if not isinstance(key, str):
        raise UsageError(f"metric names are strings, got {key!r:.40} ({type(key).__name__})")
    return str(key)


def to_step(key: str, value: Any) -> int:
    """A step: a whole number that fits int64 (the steps' type), as the JSONL reader
    takes it. An int is kept exact (a float would round 2**53 + 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        step = value
    else:
        number = to_float(key, value)
        if not math.isfinite(number) or number != int(number):
            raise UsageError(f"step {key!r} must be a whole number, got {value!r}")
        step = int(number)
    if not STEP_MIN <= step <= STEP_MAX:
        raise UsageError(f"step {key!r} must fit int64, got {step}")
    return step


class RowBuffer:
    """Points observed but not yet fed, per metric, with each metric's axis and last step."""

    def __init__(self, axis: str = "step"):
        self.axis = axis
        self.step_keys: dict[str, str] = {}
        self.last_step: dict[str, int] = {}
        self.pending: dict[str, tuple[list[int], list[float]]] = {}
        self.points = 0

    def add(self, row: Mapping[str, Any]) -> int:
        """Buffer one row; returns how many points it held. Checks everything before
        keeping anything, so a rejected row leaves the buffer as it was."""
        for key in row:
            metric_name(key)
        steps = {k: to_step(k, v) for k, v in row.items() if self._is_axis(k)}
        taken: list[tuple[str, str, int, float]] = []
        for key, value in row.items():
            if key in steps:
                continue
            axis = self._axis_of(key, steps)
            known = self.step_keys.get(key, axis)
            if known != axis:
                raise UsageError(
                    f"metric {key!r} was logged on step axis {known!r} and now on {axis!r}; "
                    "a metric keeps one axis"
                )
            step = steps[axis]
            last = self.last_step.get(key)
            if last is not None and step < last:
                raise UsageError(
                    f"metric {key!r}: {axis} {step} arrived after {axis} {last}; steps of a "
                    "metric must not go back (a gate judges points in order)"
                )
            taken.append((key, axis, step, to_float(key, value)))
        for key, axis, step, value in taken:
            self.step_keys[key] = axis
            self.last_step[key] = step
            steps_list, values = self.pending.setdefault(key, ([], []))
            steps_list.append(step)
            values.append(value)
        self.points += len(taken)
        return len(taken)

    def _is_axis(self, key: str) -> bool:
        return key == self.axis or is_step_key(key)

    def _axis_of(self, metric: str, steps: Mapping[str, int]) -> str:
        ns, sep, _ = metric.partition("/")
        candidates = [f"{ns}/step", DEFAULT_STEP_ALIASES.get(ns, "")] if sep else []
        candidates += [self.axis, "step", "_step"]
        found = next((c for c in candidates if c and c in steps), None)
        if found is None:
            raise UsageError(
                f"no step for metric {metric!r}: pass a step, or put {self.axis!r}"
                + (f" or {ns + '/step'!r}" if sep else "")
                + " in the row"
            )
        return found

    def take(self) -> dict[str, Series]:
        """Hand over the buffered points as series and forget them."""
        out = {
            metric: Series(
                metric,
                np.asarray(steps, dtype=STEP_DTYPE),
                np.asarray(values, dtype=VALUE_DTYPE),
                self.step_keys[metric],
            )
            for metric, (steps, values) in self.pending.items()
        }
        self.pending = {}
        return out


class MemorySource(LiveSource):
    """A live source fed by the caller instead of a file: `LiveGate` polls it like any
    other, so in-process gating judges exactly as `watch`/`run` do."""

    kind = "memory"

    def __init__(self, run: Run, axis: str = "step"):
        super().__init__(run.source)
        self.run = run
        self.rows = RowBuffer(axis)

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return False  # never opened from a SOURCE string

    def add_rows(self, rows: Iterable[Mapping[str, Any]]) -> int:
        return sum(self.rows.add(row) for row in rows)

    def read(self) -> Run:
        raise UsageError("an in-process gate keeps no history to read; ask it for a verdict")

    def poll(self) -> Poll:
        series = self.rows.take()
        points = sum(len(s) for s in series.values())
        # Never "ended": the caller says when the run ends (Gate.finalize).
        return Poll(series=series, run=self.run, ended=False, points=points)

    def cursor(self) -> dict[str, Any]:
        return {}

    def restore(self, cursor: dict[str, Any]) -> None:
        return None
