"""One rule on one run, as a pipeline: selection (which points), then reduction (one
value of the whole selection) or judgement (point by point), worded by wording.py.

Each stage keeps its state as a dataclass; `to_state`/`restore` carry them as plain
data (statedata), the daemon saves them on every poll. Most of a run's trackers are not
changed by a poll, so a tracker counts the times its state may have changed (`changes`):
every method that changes a stage's state (or runs a check's own code on it) counts
first (`_touch`), and the daemon encodes a state again only when the count moved
(tests/test_engine_state_cache.py holds the JSON it kept equal to a fresh one).
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields, replace
from typing import Any

import numpy as np

from gatekeeper.checks import AggregateCheck, EvalContext, Outcome
from gatekeeper.engine import judgement, reduction, selection, wording
from gatekeeper.engine.judgement import Judgement
from gatekeeper.engine.reduction import Reduction
from gatekeeper.engine.selection import ALL_STEPS, Selection
from gatekeeper.model import Run
from gatekeeper.policy.binding import config_bound
from gatekeeper.policy.patterns import matches
from gatekeeper.policy.schema import Reduce
from gatekeeper.policy.spec import RuleSpec
from gatekeeper.statedata import StateDataError, decode_fields, encode
from gatekeeper.verdict import RuleResult, Status

_PLAIN = frozenset({int, str, bool})  # exactly these types (not numpy's, not enums): as is


def _state_value(value: Any) -> Any:
    """`statedata.encode(value)`, with the shapes most state fields have on every poll
    made directly: a plain int/str/bool/None is itself; a tuple, list or set of them and
    finite floats is their list (a set sorted, as encode does). Anything else (arrays,
    NaN, numpy scalars, nesting) goes through encode."""
    kind = type(value)
    if value is None or kind in _PLAIN:
        return value
    if kind is tuple or kind is list or kind is set:
        if not value:  # most of them on every poll: no missing steps, tail, marks
            return []
        for v in value:
            if not (type(v) in _PLAIN or (type(v) is float and math.isfinite(v))):
                return encode(value)
        return sorted(value) if kind is set else list(value)
    return encode(value)


class _Stage:
    """How one stage's dataclass is saved: its fields by declared type."""

    def __init__(self, cls: type, names: tuple[str, ...]):
        hints = typing.get_type_hints(cls)
        self.cls, self.hints = cls, {n: hints[n] for n in names}

    def dump(self, state: Any) -> dict[str, Any]:
        out = {}
        for name in self.hints:  # `_state_value`, its commonest case without the call
            value = getattr(state, name)
            out[name] = value if value is None or type(value) in _PLAIN else _state_value(value)
        return out

    def load(self, data: Any, where: str, into: Any) -> Any:
        for name, value in decode_fields(data, self.hints, where).items():
            setattr(into, name, value)
        return into


_SELECTION = _Stage(Selection, tuple(f.name for f in fields(Selection)))
_REDUCTION = _Stage(Reduction, tuple(f.name for f in fields(Reduction)))
_JUDGEMENT = _Stage(Judgement, judgement.SAVED)


class RuleTracker:
    """The state of one rule on one run, fed the new points of its metric chunk by chunk."""

    # The daemon keeps a tracker per rule per run (16,000 at 1,000 runs of 16 rules):
    # slots, not a per-instance dict, keep each small.
    __slots__ = (
        "rule", "declared", "selection", "reduction", "judgement", "plot_params", "blind",
        "_texts", "_memo", "changes", "kept",
    )

    def __init__(self, rule: RuleSpec, *, bounded: bool = False):
        """`bounded`: the verdicts will have no history store and no reference runs (the
        daemon's), so a check that reads one keeps its first point only (`blind`)."""
        self.rule = rule
        self.declared = rule  # as loaded: `rule` differs once a config-read bound is bound
        reads = getattr(rule.check, "reads", None)
        self.blind = bounded and isinstance(rule.check, AggregateCheck) and reads is not None
        self.selection = selection.start(rule.steps)
        self.reduction = Reduction() if rule.reduce is not Reduce.NONE else None
        self.judgement = judgement.start(rule)
        self.plot_params: dict[str, Any] | None = None  # the check's kind and parameters
        # The rule's bound and expectation as text: constant (rule and check are frozen),
        # formatted once, not on every live verdict.
        self._texts: tuple[str, str] | None = None
        # (selected, final) -> the reduced outcome: a live poll with no new selected point
        # must not re-reduce the whole selection (O(history) per poll)
        self._memo: tuple[tuple[int, bool], Outcome] | None = None
        self.changes = 0  # how many times the state may have changed (`_touch`)
        # the Evaluation's last live result of the rule and what it was a function of
        # (engine/__init__.py, `Evaluation._judged`): given again while that is unchanged
        self.kept: tuple[tuple[Any, ...], RuleResult] | None = None

    # ---- what reports read ---------------------------------------------------------------
    @property
    def step_key(self) -> str | None:
        return self.selection.step_key

    @property
    def span(self) -> tuple[int, int] | None:
        return self.selection.span

    @property
    def marked(self) -> tuple[int, ...]:
        return self.judgement.marked

    @property
    def agg_state(self) -> Any:
        return self.judgement.agg

    def bound(self) -> str:
        """`check.describe()`, formatted once."""
        return self._fixed_texts()[0]

    def expected(self) -> str:
        """`rule.describe_expected()`, formatted once."""
        return self._fixed_texts()[1]

    def _fixed_texts(self) -> tuple[str, str]:
        if self._texts is None:
            self._texts = wording.fixed_texts(self.rule)
        return self._texts

    # ---- state as data -------------------------------------------------------------------
    def _touch(self) -> None:
        """The state may change now: what was made of it is to be made again."""
        self.changes += 1

    def to_state(self) -> dict[str, Any]:
        """Everything fed so far as plain data, stage by stage. The daemon saves it when
        `changes` moved, so the common shapes skip `encode`'s type dispatch."""
        check = self.rule.check
        return {
            "selection": _SELECTION.dump(self.selection),
            "reduction": None if self.reduction is None else _REDUCTION.dump(self.reduction),
            "judgement": _JUDGEMENT.dump(self.judgement),
            "aggregate": (
                check.dump_state(self.judgement.agg) if isinstance(check, AggregateCheck) else None
            ),
        }

    def restore(self, data: Any, where: str) -> None:
        """Take the state `to_state` saved (StateDataError when it is not of that shape)."""
        keys = {"selection", "reduction", "judgement", "aggregate"}
        if not isinstance(data, dict) or set(data) != keys:
            raise StateDataError(f"{where}: expected a tracker state mapping of {sorted(keys)}")
        _SELECTION.load(data["selection"], f"{where}.selection", self.selection)
        if self.reduction is not None:
            _REDUCTION.load(data["reduction"], f"{where}.reduction", self.reduction)
        elif data["reduction"] is not None:
            raise StateDataError(f"{where}.reduction: a rule without reduce keeps none")
        _JUDGEMENT.load(data["judgement"], f"{where}.judgement", self.judgement)
        check = self.rule.check
        if isinstance(check, AggregateCheck):
            self.judgement.agg = check.load_state(data["aggregate"], f"{where}.aggregate")
        elif data["aggregate"] is not None:
            raise StateDataError(f"{where}.aggregate: a {check.kind} rule keeps none")
        self._memo = None
        self._touch()

    def observations(self) -> tuple[np.ndarray, np.ndarray]:
        """The selected values so far by coordinate step, sorted, finite only: what a
        history rule records. `last`/`tail` selections count back from the end (-n..-1)."""
        if self.rule.steps.kind in ("tail", "last"):
            if not self.selection.tail:
                return np.empty(0, np.int64), np.empty(0)
            values = selection.tail_points(self.selection, self.rule.steps)[1]
            coords = np.arange(-values.size, 0, dtype=np.int64)
        else:
            points = getattr(self.rule.check, "points", None)
            if points is None:
                raise TypeError(f"a {self.rule.check.kind} rule keeps no selected points")
            coords, values = points(self.judgement.agg)
            order = np.argsort(coords, kind="stable")
            coords, values = coords[order], values[order]
        keep = np.isfinite(values)
        return coords[keep].astype(np.int64), values[keep].astype(np.float64)

    # ---- feeding -------------------------------------------------------------------------
    def feed(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        step_key: str,
        shape: tuple[int, int, int] | None = None,
        finite: bool | None = None,
    ) -> None:
        """Fold new points (sorted by step). `shape` = (lowest step, highest step, largest
        gap between neighbours) of `steps`, and `finite` = whether every value is finite,
        when the caller computed them once for every rule reading the metric."""
        if not steps.size:
            return
        self._touch()
        chunk = selection.take(
            self.selection, self.rule.steps, steps, values, step_key, shape, finite
        )
        if chunk is not None:
            self._judge(*chunk)

    def bind(self, run: Run) -> None:
        """Learn what the selection reads from the run's config (steps {every: config.k})."""
        self._touch()
        for chunk in selection.bind(self.selection, self.rule.steps, run):
            self._judge(*chunk)

    def bind_bound(self, run: Run) -> Outcome | None:
        """Read a bound the rule takes from the run's config (`check: {min: config.k}`,
        reduced rules only, so no point was judged before): ERROR when the run lacks it.
        Not read where the source can never carry the metric: that rule is not judged."""
        capture, rule = run.capture, self.rule
        inputs = rule.expr.metrics if rule.expr is not None else (rule.metric,)
        if capture is not None and any(m not in capture.keys for m in inputs):
            return None
        check = config_bound(self.declared, run)
        if isinstance(check, str):  # unbound again: no bound of a config it no longer has
            self._bound(self.declared)
            return Outcome(Status.ERROR, check)
        if check != self.rule.check:
            self._bound(replace(self.declared, check=check))
        return None

    def _bound(self, rule: RuleSpec) -> None:
        if rule is not self.rule:
            self.rule = rule
            self._texts, self.plot_params, self._memo = None, None, None

    def park(self) -> None:
        """`selection.park` (a bounded evaluation's verdict found the period unknown)."""
        if selection.parks(self.selection, self.rule.steps):
            self._touch()
            selection.park(self.selection, self.rule.steps)

    def see_axis(self, last: int | None) -> None:
        """The run's last step on this rule's step axis (any metric), before `outcome`."""
        if self.selection.axis_last != last:
            self._touch()
            self.selection.axis_last = last

    def _judge(self, steps: np.ndarray, values: np.ndarray, finite: bool | None) -> None:
        if self.reduction is not None:
            reduction.add(self.reduction, steps, values, finite, self.rule.reduce)
        else:
            judgement.feed(self.judgement, self.rule, steps, values, finite, self.blind)

    # ---- judging -------------------------------------------------------------------------
    def outcome(self, *, final: bool, ctx: EvalContext) -> Outcome:
        """The rule's outcome on everything fed so far (`final`: the run has ended)."""
        rule, sel = self.rule, self.selection
        axis = sel.step_key or "step"
        if isinstance(rule.check, AggregateCheck):
            self._touch()  # its own code judges (and may change: isclose) its state
        if sel.seen == 0:
            return self._absent(final, ctx)
        if sel.period_error is not None:
            return Outcome(Status.ERROR, sel.period_error)
        if rule.steps.kind in ("tail", "last"):
            if not final:
                return Outcome(Status.PENDING, wording.pending_end(rule.steps))
            return self._judge_tail(ctx)
        if self.reduction is not None:
            return self._reduced(final, axis)
        judged = self.judgement
        settled = judgement.settled(judged, rule, axis)
        if settled is not None:
            return settled
        gap = selection.gap(sel, rule.steps, axis) or judgement.window_gap(
            judged, rule, sel.selected
        )
        if gap:
            return Outcome(Status.ERROR if final else Status.PENDING, gap, judged=judged.judged)
        if isinstance(rule.check, AggregateCheck):
            # live, an aggregate is judged as final once no future point can enter its
            # selection; until then it decides for itself what it may conclude
            done = final or selection.complete(sel, rule.steps)
            return rule.check.outcome(judged.agg, final=done, ctx=ctx)
        return judgement.passed(judged, rule, axis, self.bound())

    def _reduced(self, final: bool, axis: str) -> Outcome:
        assert self.reduction is not None
        sel = self.selection
        gap = selection.gap(sel, self.rule.steps, axis)
        if gap and final:
            return Outcome(Status.ERROR, gap)
        if not (final or (not gap and selection.complete(sel, self.rule.steps))):
            return reduction.early(self.reduction, self.rule, axis)
        key = (sel.selected, final)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        outcome = reduction.judge(self.reduction, self.rule, axis, self.bound())
        self._memo = (key, outcome)
        return outcome

    def _judge_tail(self, ctx: EvalContext) -> Outcome:
        """`last` / `{last: n}`: the last n points judged as a whole run of their own."""
        sel = self.selection
        self._touch()  # sets the span and marked steps
        stopped = selection.stopped_early(sel, self.rule.steps, self.rule.metric)
        if stopped is not None and stopped[1]:
            return Outcome(Status.ERROR, stopped[0], step=sel.max_step)
        steps, values = selection.tail_points(sel, self.rule.steps)
        tracker = RuleTracker(replace(self.rule, steps=ALL_STEPS), bounded=self.blind)
        tracker.feed(steps, values, sel.step_key or "step")
        sel.span, self.judgement.marked = tracker.span, tracker.marked
        out = tracker.outcome(final=True, ctx=ctx)
        if stopped is not None:  # said beside the verdict, which it does not change
            out = replace(out, message=f"{out.message}; {stopped[0]}")
        return out

    def _absent(self, final: bool, ctx: EvalContext) -> Outcome:
        """A metric with no points yet: pending live; at the end an error, a skip (not
        logged, `if_logged`) or its summary value."""
        rule = self.rule
        idle = getattr(rule.check, "idle", None)  # a check that cannot judge here at all
        if idle is not None and (reason := idle(ctx)) is not None:
            return Outcome(Status.SKIP, reason)
        if not final:
            return Outcome(Status.PENDING, wording.waiting(rule.metric))
        if rule.template:
            return self._unmatched(ctx)
        summary = getattr(ctx.run, "summary_values", None) or {}
        if rule.expr is None and rule.metric in summary:
            return self._judge_summary(summary[rule.metric], ctx)
        available = list(getattr(ctx.run, "series", {}) or {})
        capture = getattr(ctx.run, "capture", None)
        inputs = rule.expr.metrics if rule.expr is not None else (rule.metric,)
        absent = [m for m in inputs if m not in available]
        uncaptured = [m for m in absent if capture is not None and m not in capture.keys]
        if capture is not None and uncaptured:  # no run of this source could log it
            why = wording.not_captured(uncaptured, capture, rule.if_logged)
            return Outcome(Status.SKIP, why, not_judged=wording.not_captured_by(capture))
        if rule.if_logged and absent:
            return Outcome(Status.SKIP, wording.not_logged(absent))
        if rule.expr is not None:
            from gatekeeper.expr import missing_inputs

            return Outcome(Status.ERROR, missing_inputs(rule.expr, available))
        if rule.metric in available:  # named by the source (a wandb key, an empty series)
            return Outcome(Status.ERROR, wording.no_points_logged(rule.metric))
        return Outcome(Status.ERROR, wording.not_in_run(rule.metric, available))

    def _unmatched(self, ctx: EvalContext) -> Outcome:
        """A pattern no metric of the ended run matches: a skip where no run of the
        source could log one (not captured) or with `if_logged`, else an error."""
        pattern, capture = self.rule.metric, getattr(ctx.run, "capture", None)
        if capture is not None and not any(matches(pattern, k) for k in capture.keys):
            why = wording.not_captured([pattern], capture, self.rule.if_logged)
            return Outcome(Status.SKIP, why, not_judged=wording.not_captured_by(capture))
        if self.rule.if_logged:
            return Outcome(Status.SKIP, wording.not_logged([pattern]))
        available = list(getattr(ctx.run, "series", {}) or {})
        return Outcome(Status.ERROR, wording.no_match(pattern, available))

    def _judge_summary(self, value: float, ctx: EvalContext) -> Outcome:
        """A metric with no history points but a summary value (HF's `train_loss`): judged
        as one point without a step; a selection of steps cannot pick it."""
        if self.rule.steps.kind not in ("all", "first", "last", "tail"):
            return Outcome(Status.ERROR, wording.summary_unselectable(self.rule, value))
        single = RuleTracker(replace(self.rule, steps=ALL_STEPS), bounded=self.blind)
        single.feed(np.zeros(1, np.int64), np.array([value], float), "summary")
        out = single.outcome(final=True, ctx=ctx)
        message = wording.summary_judged(out.message)
        return replace(out, message=message, step=None, value=value)
