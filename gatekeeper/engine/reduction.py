"""Reduction: a rule with `reduce:` (mean, median, min, max, last) judges one value made
of its whole selection, once no later point can enter it (or the run has ended).

Until then it is PENDING, except that a NaN/Inf inside the selection makes the reduction
an ERROR whatever comes later, said at once in the words the final reduction uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.checks import MaskCheck, Outcome
from gatekeeper.checks.base import mean_rows
from gatekeeper.engine import wording
from gatekeeper.policy.schema import Reduce
from gatekeeper.policy.spec import RuleSpec
from gatekeeper.verdict import Status


@dataclass(slots=True)
class Reduction:
    """The selected points of a reducing rule (saved state)."""

    values: list[np.ndarray] = field(default_factory=list)
    steps: list[np.ndarray] = field(default_factory=list)
    error: tuple[int, float] | None = None  # the first NaN/Inf selected: (step, value)


def _median(values: np.ndarray) -> float:
    """np.median, whose mean of the two middle values cannot overflow to Inf (1.7e308 and
    1.7e308 have the median 1.7e308): taken again of the halved values (exact at that size)."""
    with np.errstate(over="ignore"):
        median = float(np.median(values))
    if not math.isfinite(median):
        median = float(np.ldexp(np.median(np.ldexp(values, -1)), 1))
    return median


# mean and median of finite values are never NaN or Inf by a float sum's overflow: a
# mean of 0 made NaN passed `between` and `approx` (a NaN compares false)
REDUCERS: dict[Reduce, Callable[[np.ndarray], Any]] = {
    Reduce.MEAN: lambda v: mean_rows(v[np.newaxis])[0],
    Reduce.MEDIAN: _median,
    Reduce.MIN: np.min,
    Reduce.MAX: np.max,
    Reduce.LAST: lambda v: v[-1],
}


def add(state: Reduction, steps: np.ndarray, values: np.ndarray, finite: bool | None) -> None:
    """Keep selected points; note the first NaN/Inf (`finite`: the chunk has none)."""
    state.values.append(values)
    state.steps.append(steps)
    if state.error is None and not finite:
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            state.error = (int(steps[i]), float(values[i]))


def early(state: Reduction, rule: RuleSpec, axis: str) -> Outcome:
    """The outcome while the selection may still grow: ERROR at once for a NaN/Inf
    already selected, else PENDING."""
    if state.error is not None:
        step, value = state.error
        return nonfinite(rule, axis, step, value)
    return Outcome(Status.PENDING, wording.pending_reduction(rule))


def nonfinite(rule: RuleSpec, axis: str, step: int, value: float) -> Outcome:
    message = wording.nonfinite_in_reduction(rule, axis, step, value)
    return Outcome(Status.ERROR, message, step=step, value=value)


def judge(state: Reduction, rule: RuleSpec, axis: str, bound: str) -> Outcome:
    """The reduced value of the whole selection (not empty) against the check."""
    values = np.concatenate(state.values)
    steps = np.concatenate(state.steps)
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        return nonfinite(rule, axis, int(steps[i]), float(values[i]))
    value = float(REDUCERS[rule.reduce](values))
    assert isinstance(rule.check, MaskCheck)
    violates = bool(rule.check.violations(np.array([value]), 0)[0])
    label = wording.reduced(rule, axis, int(steps.min()), int(steps.max()), values.size)
    if violates:
        message = wording.reduced_failed(label, rule.check.explain(value))
        return Outcome(Status.FAIL, message, value=value, violations=1, judged=1)
    message = wording.reduced_passed(label, value, bound)
    return Outcome(Status.PASS, message, value=value, judged=1)
