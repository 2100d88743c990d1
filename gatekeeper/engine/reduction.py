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
    """The selected points of a reducing rule (saved state). `min`, `max` and `last` keep
    their running value instead (`RUNNING`): the state stays one number however long the
    selection; `mean` and `median` keep the points."""

    values: list[np.ndarray] = field(default_factory=list)
    steps: list[np.ndarray] = field(default_factory=list)
    error: tuple[int, float] | None = None  # the first NaN/Inf selected: (step, value)
    count: int = 0  # points selected
    span: tuple[int, int] | None = None  # lowest and highest step selected
    running: float | None = None  # min/max/last of the points so far (RUNNING)


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


# reductions folded chunk by chunk: the same value as of all the points at once
RUNNING: dict[Reduce, Callable[[float, float], float]] = {
    Reduce.MIN: lambda a, b: min(a, b),
    Reduce.MAX: lambda a, b: max(a, b),
    Reduce.LAST: lambda a, b: b,
}
# A chunk's min or max of zeros is folded as +0.0, whichever of -0.0 and 0.0 it met first:
# np.min of a chunk and min() across chunks each keep the one they meet first, so a run
# polled in chunks said -0 where `check`, one chunk, said 0 (the verdict oracle, new seeds)
SIGNED_ZERO_FREE = (Reduce.MIN, Reduce.MAX)


def add(
    state: Reduction,
    steps: np.ndarray,
    values: np.ndarray,
    finite: bool | None,
    how: Reduce = Reduce.MEAN,
) -> None:
    """Keep selected points (non-empty) or, for a `RUNNING` reduction `how`, fold them
    into its value; note the first NaN/Inf (`finite`: the chunk has none)."""
    lo, hi = int(steps.min()), int(steps.max())
    if state.span is not None:
        lo, hi = min(state.span[0], lo), max(state.span[1], hi)
    state.span = (lo, hi)
    state.count += int(values.size)
    fold = RUNNING.get(how)
    if fold is None:
        state.values.append(values)
        state.steps.append(steps)
    elif state.error is None:  # after a NaN/Inf the value is never judged
        value = float(REDUCERS[how](values))
        if how in SIGNED_ZERO_FREE:
            value += 0.0  # -0.0 + 0.0 is +0.0
        state.running = value if state.running is None else fold(state.running, value)
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
    if state.error is not None:  # the first NaN/Inf in the order fed, which is step order
        return nonfinite(rule, axis, *state.error)
    if state.running is not None:
        value = state.running
    else:
        value = float(REDUCERS[rule.reduce](np.concatenate(state.values)))
    assert isinstance(rule.check, MaskCheck) and state.span is not None
    violates = bool(rule.check.violations(np.array([value]), 0)[0])
    label = wording.reduced(rule, axis, state.span[0], state.span[1], state.count)
    if violates:
        message = wording.reduced_failed(label, rule.check.explain(value))
        return Outcome(Status.FAIL, message, value=value, violations=1, judged=1)
    message = wording.reduced_passed(label, value, bound)
    return Outcome(Status.PASS, message, value=value, judged=1)
