"""Selection: which points of a rule's metric it looks at (`steps:`), what it has seen
of the metric, and whether a later point can still enter the selection.

`take` records a chunk of new points and hands back the ones selected now; the rest of
the rule (reduction or judgement) sees only those.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gatekeeper.engine import wording
from gatekeeper.model import OWN_STEP, Run
from gatekeeper.policy.binding import period_from_config
from gatekeeper.policy.schema import Steps

ALL_STEPS = Steps(kind="all")

# selected steps, their values, and whether every value is finite (None: not known)
Chunk = tuple[np.ndarray, np.ndarray, bool | None]


@dataclass(slots=True)
class Selection:
    """What a rule has seen of its metric and selected from it (saved state)."""

    step_key: str | None = None
    seen: int = 0
    min_step: int | None = None
    max_step: int | None = None
    max_gap: int = 1  # widest step gap between consecutive points of the metric
    axis_last: int | None = None  # the run's last step on this axis (any metric)
    first_taken: bool = False
    missing_steps: set[int] = field(default_factory=set)  # of a step list
    tail: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # last / {last: n}
    selected: int = 0
    span: tuple[int, int] | None = None  # first..last selected step (for plots)
    # steps {every: config.<key>}: the period comes from the run's config, which the first
    # verdict brings; points fed before it wait in `unbound` (one chunk, not one per poll)
    period: int | None = None
    period_error: str | None = None
    unbound: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    # A bounded evaluation (the daemon) keeps no points for a period a verdict found
    # unknown (`park`): from then they are only counted (`dropped`), and a period learned
    # after that asks for the run to be read again (`reread`, why), since which of the
    # dropped points it selects is known only then.
    parked: bool = False
    dropped: int = 0
    reread: str | None = None


def start(sel: Steps) -> Selection:
    """The state of a selection that has seen nothing."""
    every = sel.kind == "every" and not sel.period_from
    return Selection(
        missing_steps=set(sel.steps) if sel.kind == "list" else set(),
        period=sel.count if every else None,
    )


def in_range(sel: Steps, steps: np.ndarray) -> np.ndarray:
    """Which of `steps` a `steps: {from, to}` selection keeps: both ends inclusive, either
    one open."""
    keep = np.ones(steps.shape, bool)
    if sel.start is not None:
        keep &= steps >= sel.start
    if sel.end is not None:
        keep &= steps <= sel.end
    return keep


def step_shape(steps: np.ndarray) -> tuple[int, int, int]:
    """(lowest, highest, largest gap between neighbours) of non-empty steps (fed sorted).
    A live poll's few points in plain Python: four numpy calls cost ~20 us a metric."""
    if steps.size <= 64:
        s = steps.tolist()
        gap = max((b - a for a, b in zip(s[:-1], s[1:], strict=True)), default=0)
        return min(s), max(s), gap
    lo, hi = int(steps.min()), int(steps.max())
    if hi - lo > 2**63 - 1:  # an int64 difference would wrap: hostile steps, in Python
        s = steps.tolist()
        return lo, hi, max(b - a for a, b in zip(s[:-1], s[1:], strict=True))
    gap = int(np.max(np.diff(steps))) if steps.size > 1 else 0
    return lo, hi, gap


def take(
    state: Selection,
    sel: Steps,
    steps: np.ndarray,
    values: np.ndarray,
    step_key: str,
    shape: tuple[int, int, int] | None,
    finite: bool | None,
) -> Chunk | None:
    """Record new points (non-empty, sorted by step) and return those selected now.
    `shape` (step_shape) and `finite` come from the caller when it computed them once for
    every rule reading the metric."""
    state.step_key = step_key
    state.seen += int(steps.size)
    lo, hi, inner = shape if shape is not None else step_shape(steps)
    if state.max_step is not None:
        inner = max(inner, int(steps[0]) - state.max_step)
    state.max_gap = max(state.max_gap, inner)
    state.min_step = lo if state.min_step is None else min(state.min_step, lo)
    state.max_step = hi if state.max_step is None else max(state.max_step, hi)
    kind = sel.kind
    if kind in ("tail", "last"):
        _keep_tail(state, steps, values, sel.count or 1)
        return None
    if kind == "every":
        return _select_every(state, sel, steps, values)
    if kind == "all":  # the whole chunk, whose lowest and highest step are known
        return _selected(state, steps, values, finite, (lo, hi))
    if kind == "first":
        if state.first_taken:
            return None
        state.first_taken = True
        i = int(np.argmin(steps))
        steps, values = steps[i : i + 1], values[i : i + 1]
    elif kind == "list":
        if not sel.steps or lo > max(sel.steps):
            return None  # every listed step lies before this chunk (np.isin: ~10 us a rule)
        keep = np.isin(steps, sel.steps)
        steps, values = steps[keep], values[keep]
        state.missing_steps.difference_update(int(s) for s in steps)
    else:  # range
        keep = in_range(sel, steps)
        steps, values = steps[keep], values[keep]
    return _selected(state, steps, values, finite, None) if steps.size else None


def _selected(
    state: Selection,
    steps: np.ndarray,
    values: np.ndarray,
    finite: bool | None,
    span: tuple[int, int] | None,
) -> Chunk:
    """Count selected points (non-empty) and widen the selected span."""
    state.selected += int(steps.size)
    lo, hi = span if span is not None else (int(steps.min()), int(steps.max()))
    if state.span is not None:
        lo, hi = min(state.span[0], lo), max(state.span[1], hi)
    state.span = (lo, hi)
    return steps, values, finite


def _keep_tail(state: Selection, steps: np.ndarray, values: np.ndarray, n: int) -> None:
    state.tail.append((steps[-n:], values[-n:]))
    total = sum(len(s) for s, _ in state.tail)
    while state.tail and total - len(state.tail[0][0]) >= n:
        total -= len(state.tail.pop(0)[0])


def tail_points(state: Selection, sel: Steps) -> tuple[np.ndarray, np.ndarray]:
    """The last n points of a `last` / `{last: n}` selection (steps, values)."""
    n = sel.count or 1
    steps = np.concatenate([s for s, _ in state.tail])[-n:]
    values = np.concatenate([v for _, v in state.tail])[-n:]
    return steps, values


def _select_every(
    state: Selection, sel: Steps, steps: np.ndarray, values: np.ndarray
) -> Chunk | None:
    if state.period is None and state.parked:
        state.dropped += int(steps.size)
        return None
    if state.period is None:
        # One waiting chunk, not one per poll: the daemon saves this state on every poll,
        # and a run whose config never sets the key would add an array a poll. Judging is
        # the same whatever the chunking (bind hands them back in order).
        if state.unbound:
            parts = [*state.unbound, (steps, values)]
            steps = np.concatenate([p[0] for p in parts])
            values = np.concatenate([p[1] for p in parts])
        state.unbound = [(steps, values)]
        return None
    keep = steps % state.period == sel.offset
    if not np.count_nonzero(keep):  # not keep.any(), without its Python wrapper
        return None
    return _selected(state, steps[keep], values[keep], None, None)


def bind(state: Selection, sel: Steps, run: Run) -> list[Chunk]:
    """Learn the period of `steps: {every: config.k}` from the run's config; the points
    that waited for it and are selected by it, in the order they were fed. A config that
    later gives another period (or none) sets `reread`: the points judged by the old one
    are not those the new one selects."""
    if sel.kind != "every" or not sel.period_from:
        return []
    period = _period(sel, run)
    if state.period is not None:
        if period != state.period and state.seen:
            state.reread = wording.period_changed(state.period, period)
        if period == state.period or state.seen:
            return []
        state.period = None  # nothing fed yet: bound again below
    if isinstance(period, str):
        state.period_error = period
        return []
    state.period, state.period_error = period, None  # an error of an earlier config is past
    if state.dropped:
        state.reread = wording.period_after_dropped(period, state.dropped)
    waiting, state.unbound = state.unbound, []
    chunks = (_select_every(state, sel, steps, values) for steps, values in waiting)
    return [c for c in chunks if c is not None]


def _period(sel: Steps, run: Run) -> int | str:
    """The period the run's config gives, else the default; why none, as text."""
    period = period_from_config(sel.period_from, run)
    if period is None:
        return sel.count if sel.count is not None else wording.no_period(sel.period_from)
    return period


def park(state: Selection, sel: Steps) -> None:
    """A verdict of a bounded evaluation found the period of `steps: {every: config.k}`
    unknown: its waiting points, and those fed until it is known, are counted, not kept.
    Nothing a verdict says depends on them meanwhile: the rule is an ERROR (no period, a
    required key unset) or not applicable; a period learned later sets `reread`."""
    if not parks(state, sel):
        return
    state.parked = True
    state.dropped += sum(int(s.size) for s, _ in state.unbound)
    state.unbound = []


def parks(state: Selection, sel: Steps) -> bool:
    """Whether `park` changes the state."""
    every = sel.kind == "every" and sel.period_from and state.period is None
    return bool(every) and not (state.parked and not state.unbound)


def complete(state: Selection, sel: Steps) -> bool:
    """Whether no later point can enter the selection (live: the selection is whole)."""
    if sel.kind == "first":
        return state.first_taken
    if sel.kind == "list":
        return not state.missing_steps
    if sel.kind == "range" and sel.end is not None:
        return state.max_step is not None and state.max_step > sel.end
    return False


def gap(state: Selection, sel: Steps, axis: str) -> str | None:
    """What the selection lacks: listed steps the metric has not logged, or any point."""
    if sel.kind == "list" and state.missing_steps:
        return wording.missing_steps(axis, state.missing_steps, state.min_step, state.max_step)
    if state.selected == 0:
        return wording.no_points(sel, axis, state.min_step, state.max_step)
    return None


def stopped_early(state: Selection, sel: Steps, metric: str) -> tuple[str, bool] | None:
    """A `last` selection judges the run's end: a metric whose last point lies further
    before the last step of its axis (any metric on it) than its own widest step gap
    would be judged on a stale point. On a named axis (train/step, _step, a wandb step
    metric) the metrics share the step, so that is an error: (message, True). On the
    plain `step` (OWN_STEP) each metric counts its own steps (epochs next to batches), so
    another metric's end says nothing of this one's: a note, (message, False)."""
    last, axis_last = state.max_step, state.axis_last
    if last is None or axis_last is None or axis_last - last <= state.max_gap:
        return None
    axis = state.step_key or OWN_STEP
    if axis == OWN_STEP:
        return wording.ends_before_others(metric, axis, last, axis_last), False
    return wording.stopped_early(sel, metric, axis, last, axis_last), True
