"""`present_at: {steps_of: PATTERN, unless: PATTERN}` — the rule's metric has a point at
every step at which a metric matching `steps_of` has one (on the same step axis), except
steps at which a metric matching `unless` has one. miles' MetricChecker asserts the key at
every eval round (an `eval/step` with `eval/*` points) but a round it marks skipped
(`eval/skipped_<reason>`).

The engine feeds this check one point per such step (engine/rounds.py): 1 where the metric
has a point there (any value: a NaN is a point; `finite` judges values), 0 where it has
none; so it is judged point by point like any other check, whole and live alike."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import field_validator

from gatekeeper.checks.base import MaskCheck


def _patterns(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(p, str) and p for p in items):
        raise ValueError(f"give a metric name pattern or a list of them, got {value!r}")
    return tuple(items)


class PresentAt(MaskCheck):
    kind = "present_at"
    steps_of: tuple[str, ...]
    unless: tuple[str, ...] = ()

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        return {"steps_of": value}  # `present_at: "eval/*"`

    @field_validator("steps_of", "unless", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> tuple[str, ...]:
        return _patterns(value)

    @field_validator("steps_of")
    @classmethod
    def _some(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("steps_of names at least one metric pattern")
        return value

    def describe(self) -> str:
        text = f"a point at every step of {' or '.join(self.steps_of)}"
        if self.unless:
            text += f" (but steps of {' or '.join(self.unless)})"
        return text

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return np.asarray(values[n_context:] < 0.5)

    def explain(self, value: float) -> str:
        return f"no point, while {' or '.join(self.steps_of)} has one"
