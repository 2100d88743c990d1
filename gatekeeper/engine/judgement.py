"""Judgement: a rule without `reduce:` judges its selected points one by one as they come.

A mask check (max, between, spike, ...) marks violating points, each with a full window
of context before it; `for: N` fires at the first point that ends a run of N consecutive
violating points, the run carried across chunks. An aggregate check (fraction,
trend, history, ...) folds the points into a state of its own (`agg`, saved by the
check). The first NaN/Inf ends judging: the points after it are not judged; a `for`
that fired before it is still the outcome (the first violation in step order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.checks import AggregateCheck, MaskCheck, Outcome
from gatekeeper.engine import wording
from gatekeeper.policy.spec import RuleSpec
from gatekeeper.verdict import MAX_MARKED, Severity, Status


@dataclass(slots=True)
class Judgement:
    """Point-by-point judging so far (saved state; `agg` is saved by its check)."""

    judged: int = 0
    violations: int = 0
    run: int = 0  # consecutive violating points at the end of what was judged
    context: np.ndarray = field(default_factory=lambda: np.empty(0))  # a window's lead-in
    fail: tuple[int, float] | None = None  # where `for` first fired: (step, value)
    error: tuple[int, float] | None = None  # the first NaN/Inf: (step, value)
    last: tuple[int, float] | None = None
    marked: tuple[int, ...] = ()  # the first MAX_MARKED violating steps (for plots)
    agg: Any = None


SAVED = ("judged", "violations", "run", "context", "fail", "error", "last", "marked")


def start(rule: RuleSpec) -> Judgement:
    check = rule.check
    return Judgement(agg=check.start() if isinstance(check, AggregateCheck) else None)


def feed(
    state: Judgement,
    rule: RuleSpec,
    steps: np.ndarray,
    values: np.ndarray,
    finite: bool | None,
    blind: bool = False,
) -> None:
    """Judge selected points (`finite`: the chunk they came from holds no NaN/Inf).
    `blind`: the verdicts will not give the aggregate check the input it judges against
    (`AggregateCheck.reads`), so its outcome reads no point but the first: only that one
    is fed to it (the rest are counted, and a NaN/Inf among them still ends judging)."""
    if state.error is not None:
        return
    if finite:
        _judge_finite(state, rule, steps, values, blind)
        return
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        _judge_finite(state, rule, steps[:i], values[:i], blind)
        state.error = (int(steps[i]), float(values[i]))
        return
    _judge_finite(state, rule, steps, values, blind)


def _judge_finite(
    state: Judgement, rule: RuleSpec, steps: np.ndarray, values: np.ndarray, blind: bool
) -> None:
    if not steps.size:
        return
    state.last = (int(steps[-1]), float(values[-1]))
    check = rule.check
    if isinstance(check, AggregateCheck):
        if not blind:
            state.agg = check.feed(state.agg, steps, values)
        elif state.judged == 0:
            state.agg = check.feed(state.agg, steps[:1], values[:1])
        state.judged += int(steps.size)
        return
    assert isinstance(check, MaskCheck)
    need = check.context()
    joined = np.concatenate([state.context, values]) if state.context.size else values
    n_ctx = state.context.size
    # joined[0] is point number judged: the first `need` points only ever lead in
    numbered = {"first": state.judged} if check.numbered else {}
    mask = np.asarray(check.violations(joined, n_ctx, **numbered), dtype=bool)
    # Points without a full window of context are not judged yet.
    unjudged = max(0, need - n_ctx)
    if unjudged:
        mask = mask.copy()
        mask[: min(unjudged, mask.size)] = False
    state.judged += max(0, int(values.size) - unjudged)
    state.context = joined[-need:] if need else state.context
    # the usual poll: nothing violates, no run of violations continues (count_nonzero is
    # numpy's C directly; .any() goes through a Python wrapper first: ~0.7 us a rule)
    if not np.count_nonzero(mask):
        state.run = 0
        return
    _violations(state, rule, steps, values, mask)


def _violations(
    state: Judgement, rule: RuleSpec, steps: np.ndarray, values: np.ndarray, mask: np.ndarray
) -> None:
    """Count violating points, mark the first ones, and find where `for` first fires."""
    state.violations += int(np.count_nonzero(mask))
    room = MAX_MARKED - len(state.marked)
    if room > 0:
        state.marked += tuple(int(s) for s in steps[mask][:room])
    where = np.flatnonzero(mask)
    runs, state.run = runs_at(where, mask.size, state.run)
    if state.fail is None:
        fired = where[runs >= rule.for_]  # for_ >= 1: only violating points fire
        if fired.size:
            i = int(fired[0])
            state.fail = (int(steps[i]), float(values[i]))


def runs_at(where: np.ndarray, size: int, carry: int) -> tuple[np.ndarray, int]:
    """The length of the run of consecutive violating points ending at each violating
    point: `where` = np.flatnonzero(mask) of a mask of `size` points (not empty); `carry`
    continues a run from the chunk before. Returns those lengths and the one at the mask's
    last point (0 if it does not violate). O(violations), not O(points): a rule with a few
    violations among 100,000 points pays no 100,000-long scans."""
    start = np.ones(where.size, dtype=bool)  # where a run of consecutive points begins
    np.not_equal(np.diff(where), 1, out=start[1:])
    begins = np.flatnonzero(start)
    first = where[begins]  # each run's first point
    runs = where - np.repeat(first, np.diff(np.append(begins, where.size))) + 1
    if carry and where[0] == 0:  # the first run continues the one before this chunk
        runs[: begins[1] if begins.size > 1 else where.size] += carry
    last = int(runs[-1]) if int(where[-1]) == size - 1 else 0
    return runs, last


def settled(state: Judgement, rule: RuleSpec, axis: str) -> Outcome | None:
    """The outcome once `for` or a NaN/Inf has decided it (later points cannot change it):
    the first of them in step order. Judging stops at the first NaN/Inf, so a `for` that
    fired did so before it: FAIL there, naming the NaN/Inf too (both fail the gate; the
    step a user looks at first is the first violation, whatever the polls were)."""
    if state.fail is not None:
        step, value = state.fail
        assert isinstance(rule.check, MaskCheck)  # only a mask check fires `for`
        explained = rule.check.explain(value)
        message = wording.failed(rule, explained, axis, step, state.violations, state.judged)
        if state.error is not None:
            message += wording.nonfinite_after(axis, *state.error)
        return at(state, Status.FAIL, message, step, value, state.violations)
    if state.error is not None:
        step, value = state.error
        return at(state, Status.ERROR, wording.nonfinite(axis, step, value), step, value)
    return None


def window_gap(state: Judgement, rule: RuleSpec, selected: int) -> str | None:
    """A mask check that has judged nothing: its window needs more points than selected."""
    if isinstance(rule.check, MaskCheck) and state.judged == 0:
        return wording.needs_window(rule.check.context() + 1, selected)
    return None


def passed(state: Judgement, rule: RuleSpec, axis: str, bound: str) -> Outcome:
    message = wording.passed(rule, bound, axis, state.last, state.violations, state.judged)
    step, value = state.last if state.last else (None, None)
    return at(state, Status.PASS, message, step, value, state.violations)


def at(
    state: Judgement,
    status: Status,
    message: str,
    step: int | None,
    value: float | None,
    violations: int = 0,
) -> Outcome:
    """An outcome at one point of the rule's metric, with the count of points judged."""
    return Outcome(
        status, message, step=step, value=value, violations=violations, judged=state.judged
    )


def severity(rule: RuleSpec, status: Status) -> Status:
    """A failing rule of severity `warn` warns."""
    if status is Status.FAIL and rule.severity is Severity.WARN:
        return Status.WARN
    return status
