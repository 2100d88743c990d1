"""Apply policies to a run. Pure: no clock, no network, no files.

`evaluate(policies, run, final=...)` judges a whole run. Live watchers keep an
`Evaluation` and `feed` it only the new points of each poll (O(new points)); its
`verdict` is the same function of all points fed so far.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gatekeeper.checks import AggregateCheck, EvalContext, MaskCheck, Outcome
from gatekeeper.checks.base import mean_rows
from gatekeeper.fmt import fmt
from gatekeeper.model import Run, Series
from gatekeeper.policy.binding import metric_error, missing_config, period_from_config
from gatekeeper.policy.conditions import first_failing, parse_conditions
from gatekeeper.policy.schema import Reduce, Steps
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.run_state import run_state_result
from gatekeeper.statedata import StateDataError, decode, decode_fields, encode
from gatekeeper.verdict import MAX_MARKED, Mode, RuleResult, Severity, Status, Verdict

if TYPE_CHECKING:  # expr.py is imported when a rule has an expression
    from gatekeeper.expr import Aligner

ALL_STEPS = Steps(kind="all")
_PLAIN = frozenset({int, str, bool})  # exactly these types (not numpy's, not enums): as is


def _state_value(value: Any) -> Any:
    """`statedata.encode(value)`, with the shapes most tracker fields have on every poll
    made directly: a plain int/str/bool/None is itself; a tuple, list or set of them and
    finite floats is their list (a set sorted, as encode does). Anything else (arrays,
    NaN, numpy scalars, nesting) goes through encode."""
    kind = type(value)
    if value is None or kind in _PLAIN:
        return value
    if kind is tuple or kind is list or kind is set:
        for v in value:
            if not (type(v) in _PLAIN or (type(v) is float and math.isfinite(v))):
                return encode(value)
        return sorted(value) if kind is set else list(value)
    return encode(value)


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
_REDUCERS: dict[Reduce, Callable[[np.ndarray], Any]] = {
    Reduce.MEAN: lambda v: mean_rows(v[np.newaxis])[0],
    Reduce.MEDIAN: _median,
    Reduce.MIN: np.min,
    Reduce.MAX: np.max,
    Reduce.LAST: lambda v: v[-1],
}


def in_range(sel: Steps, steps: np.ndarray) -> np.ndarray:
    """Which of `steps` a `steps: {from, to}` selection keeps: both ends inclusive, either
    one open."""
    keep = np.ones(steps.shape, bool)
    if sel.start is not None:
        keep &= steps >= sel.start
    if sel.end is not None:
        keep &= steps <= sel.end
    return keep


def _run_lengths(mask: np.ndarray, carry: int) -> np.ndarray:
    """Length of the run of consecutive True ending at each index (carry continues a run)."""
    counts = np.cumsum(mask)
    resets = np.maximum.accumulate(np.where(~mask, counts, 0))
    runs = counts - resets
    if carry:
        before_first_false = np.cumsum(~mask) == 0
        runs = runs + np.where(before_first_false, carry, 0)
    return runs


def _runs_at(where: np.ndarray, size: int, carry: int) -> tuple[np.ndarray, int]:
    """`_run_lengths` at the violating points only: `where` = np.flatnonzero(mask) of a
    mask of `size` points (not empty). Returns the run length at each of them and at the
    mask's last point (0 if it does not violate). O(violations), not O(points): a
    rule with a few violations among 100,000 points no longer pays two 100,000-long
    scans (~1 ms)."""
    start = np.ones(where.size, dtype=bool)  # where a run of consecutive points begins
    np.not_equal(np.diff(where), 1, out=start[1:])
    begins = np.flatnonzero(start)
    first = where[begins]  # each run's first point
    runs = where - np.repeat(first, np.diff(np.append(begins, where.size))) + 1
    if carry and where[0] == 0:  # the first run continues the one before this chunk
        runs[: begins[1] if begins.size > 1 else where.size] += carry
    last = int(runs[-1]) if int(where[-1]) == size - 1 else 0
    return runs, last


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


class RuleTracker:
    """The state of one rule on one run, fed the new points of its metric chunk by chunk."""

    # What `to_state` saves, by declared type: the daemon restores a tracker from this
    # data (statedata.decode), never from a serialized object. `reduced_memo` is a cache
    # and `agg_state` is saved by its check; neither is listed.
    STATE_FIELDS: dict[str, Any] = {
        "step_key": str | None,
        "seen": int,
        "min_step": int | None,
        "max_step": int | None,
        "max_gap": int,
        "axis_last": int | None,
        "first_taken": bool,
        "missing_steps": set[int],
        "tail": list[tuple[np.ndarray, np.ndarray]],
        "reduced": list[np.ndarray],
        "reduced_steps": list[np.ndarray],
        "judged": int,
        "selected": int,
        "violations": int,
        "run": int,
        "context": np.ndarray,
        "fail": tuple[int, float] | None,
        "error": tuple[int, float, str] | None,
        "last": tuple[int, float] | None,
        "period": int | None,
        "period_error": str | None,
        "unbound": list[tuple[np.ndarray, np.ndarray]],
        "span": tuple[int, int] | None,
        "marked": tuple[int, ...],
    }
    # The daemon keeps a tracker per rule per run (16,000 at 1,000 runs of 16 rules):
    # slots, not a per-instance dict, keep each small whatever fields are added.
    __slots__ = (
        *STATE_FIELDS, "rule", "plot_params", "_texts", "reduced_memo", "agg_state",
    )

    def __init__(self, rule: RuleSpec):
        self.rule = rule
        # For plots: first..last selected step, and the first MAX_MARKED violating steps.
        self.span: tuple[int, int] | None = None
        self.marked: tuple[int, ...] = ()
        self.plot_params: dict[str, Any] | None = None  # the check's kind and parameters
        # The rule's bound and expectation as text: constant (rule and check are frozen),
        # formatted once, not on every live verdict.
        self._texts: tuple[str, str] | None = None
        self.step_key: str | None = None
        self.seen = 0
        self.min_step: int | None = None
        self.max_step: int | None = None
        self.max_gap = 1  # widest step gap between consecutive points of the metric
        self.axis_last: int | None = None  # the run's last step on this axis (any metric)
        self.first_taken = False
        self.missing_steps = set(rule.steps.steps) if rule.steps.kind == "list" else set()
        self.tail: list[tuple[np.ndarray, np.ndarray]] = []  # for steps {last: n} / last
        self.reduced: list[np.ndarray] = []  # selected values, for reduce != none
        self.reduced_steps: list[np.ndarray] = []
        # (selected, final) -> outcome: a live poll with no new selected point must not
        # re-reduce the whole selection (O(history) per poll)
        self.reduced_memo: tuple[tuple[int, bool], Outcome] | None = None
        # point-by-point judging state
        self.judged = 0
        self.selected = 0
        self.violations = 0
        self.run = 0  # consecutive violating points at the end of what was judged
        self.context = np.empty(0)
        self.fail: tuple[int, float] | None = None
        self.error: tuple[int, float, str] | None = None
        self.last: tuple[int, float] | None = None
        self.agg_state: Any = (
            rule.check.start() if isinstance(rule.check, AggregateCheck) else None
        )
        # steps {every: config.<key>}: the period comes from the run's config, which the
        # first verdict brings; points fed before it wait here (once, not per poll)
        every = rule.steps.kind == "every"
        self.period: int | None = rule.steps.count if every and not rule.steps.period_from else None
        self.period_error: str | None = None
        self.unbound: list[tuple[np.ndarray, np.ndarray]] = []

    def _fixed_texts(self) -> tuple[str, str]:
        if self._texts is None:
            self._texts = (self.rule.check.describe(), self.rule.describe_expected())
        return self._texts

    def bound(self) -> str:
        """`check.describe()`, formatted once."""
        return self._fixed_texts()[0]

    def expected(self) -> str:
        """`rule.describe_expected()`, formatted once."""
        return self._fixed_texts()[1]

    def bind(self, run: Run) -> None:
        """Learn what the selection reads from the run's config (steps {every: config.k})."""
        sel = self.rule.steps
        if sel.kind != "every" or not sel.period_from or self.period is not None:
            return
        period = period_from_config(sel.period_from, run)
        if isinstance(period, str):
            self.period_error = period
            return
        if period is None:
            if sel.count is None:
                self.period_error = (
                    f"the run's config sets none of {', '.join(sel.period_from)}, and steps "
                    "every has no default"
                )
                return
            period = sel.count
        self.period = period
        waiting, self.unbound = self.unbound, []
        for steps, values in waiting:
            self._select_every(steps, values)

    def _select_every(self, steps: np.ndarray, values: np.ndarray) -> None:
        if self.period is None:
            # One waiting chunk, not one per poll: the daemon saves this state on every
            # poll, and a run whose config never sets the key would add an array a poll.
            # Judging is the same whatever the chunking (bind feeds them in order).
            if self.unbound:
                parts = [*self.unbound, (steps, values)]
                steps = np.concatenate([p[0] for p in parts])
                values = np.concatenate([p[1] for p in parts])
            self.unbound = [(steps, values)]
            return
        keep = steps % self.period == self.rule.steps.offset
        if keep.any():
            self._judge(steps[keep], values[keep])

    # ---- state as data -----------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Everything fed so far as plain data (see STATE_FIELDS). The daemon saves it on
        every poll, so the common shapes skip `encode`'s type dispatch (`_state_value`)."""
        data = {name: _state_value(getattr(self, name)) for name in self.STATE_FIELDS}
        check = self.rule.check
        data["aggregate"] = (
            check.dump_state(self.agg_state) if isinstance(check, AggregateCheck) else None
        )
        return data

    def restore(self, data: Any, where: str) -> None:
        """Take the state `to_state` saved (StateDataError when it is not of that shape)."""
        if not isinstance(data, dict) or "aggregate" not in data:
            raise StateDataError(f"{where}: expected a tracker state mapping")
        rest = {k: v for k, v in data.items() if k != "aggregate"}
        for name, value in decode_fields(rest, self.STATE_FIELDS, where).items():
            setattr(self, name, value)
        check = self.rule.check
        if isinstance(check, AggregateCheck):
            self.agg_state = check.load_state(data["aggregate"], f"{where}.aggregate")
        elif data["aggregate"] is not None:
            raise StateDataError(f"{where}.aggregate: a {check.kind} rule keeps none")
        self.reduced_memo = None

    def observations(self) -> tuple[np.ndarray, np.ndarray]:
        """The selected values so far by coordinate step, sorted, finite only: what a
        history rule records. `last`/`tail` selections count back from the end (-n..-1)."""
        if self.rule.steps.kind in ("tail", "last"):
            n = self.rule.steps.count or 1
            if not self.tail:
                return np.empty(0, np.int64), np.empty(0)
            values = np.concatenate([v for _, v in self.tail])[-n:]
            coords = np.arange(-values.size, 0, dtype=np.int64)
        else:
            points = getattr(self.rule.check, "points", None)
            if points is None:
                raise TypeError(f"a {self.rule.check.kind} rule keeps no selected points")
            coords, values = points(self.agg_state)
            order = np.argsort(coords, kind="stable")
            coords, values = coords[order], values[order]
        keep = np.isfinite(values)
        return coords[keep].astype(np.int64), values[keep].astype(np.float64)

    # ---- feeding ---------------------------------------------------------------------
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
        self.step_key = step_key
        self.seen += int(steps.size)
        lo, hi, inner = shape if shape is not None else step_shape(steps)
        if self.max_step is not None:
            inner = max(inner, int(steps[0]) - self.max_step)
        self.max_gap = max(self.max_gap, inner)
        self.min_step = lo if self.min_step is None else min(self.min_step, lo)
        self.max_step = hi if self.max_step is None else max(self.max_step, hi)
        sel = self.rule.steps
        if sel.kind in ("tail", "last"):
            self._keep_tail(steps, values, sel.count or 1)
            return
        if sel.kind == "every":
            self._select_every(steps, values)
            return
        if sel.kind == "first":
            if self.first_taken:
                return
            self.first_taken = True
            i = int(np.argmin(steps))
            steps, values = steps[i : i + 1], values[i : i + 1]
        elif sel.kind == "list":
            if not sel.steps or lo > max(sel.steps):
                return  # every listed step lies before this chunk (np.isin: ~10 us a rule)
            keep = np.isin(steps, sel.steps)
            steps, values = steps[keep], values[keep]
            self.missing_steps.difference_update(int(s) for s in steps)
        elif sel.kind == "range":
            keep = in_range(sel, steps)
            steps, values = steps[keep], values[keep]
        else:  # all: the whole chunk, whose lowest and highest step are known
            self._judge(steps, values, finite, (lo, hi))
            return
        if steps.size:
            self._judge(steps, values, finite)

    def _keep_tail(self, steps: np.ndarray, values: np.ndarray, n: int) -> None:
        self.tail.append((steps[-n:], values[-n:]))
        total = sum(len(s) for s, _ in self.tail)
        while self.tail and total - len(self.tail[0][0]) >= n:
            total -= len(self.tail.pop(0)[0])

    def _judge(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        finite: bool | None = None,
        span: tuple[int, int] | None = None,
    ) -> None:
        """Judge selected points. `finite`: True when the chunk they were selected from
        holds no NaN/Inf (then no subset does); `span`: their lowest and highest step."""
        self.selected += int(steps.size)
        lo, hi = span if span is not None else (int(steps.min()), int(steps.max()))
        if self.span is not None:
            lo, hi = min(self.span[0], lo), max(self.span[1], hi)
        self.span = (lo, hi)
        if self.rule.reduce is not Reduce.NONE:
            self.reduced.append(values)
            self.reduced_steps.append(steps)
            if self.error is None and not finite:  # the first NaN/Inf: ERROR at once
                bad = ~np.isfinite(values)
                if bad.any():
                    i = int(np.argmax(bad))
                    self.error = (int(steps[i]), float(values[i]), "non-finite")
            return
        if self.error is not None:
            return
        if finite:
            self._judge_finite(steps, values)
            return
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            self._judge_finite(steps[:i], values[:i])
            self.error = (int(steps[i]), float(values[i]), "non-finite")
            return
        self._judge_finite(steps, values)

    def _judge_finite(self, steps: np.ndarray, values: np.ndarray) -> None:
        if not steps.size:
            return
        self.last = (int(steps[-1]), float(values[-1]))
        check = self.rule.check
        if isinstance(check, AggregateCheck):
            self.agg_state = check.feed(self.agg_state, steps, values)
            self.judged += int(steps.size)
            return
        assert isinstance(check, MaskCheck)
        need = check.context()
        joined = np.concatenate([self.context, values]) if self.context.size else values
        n_ctx = self.context.size
        mask = np.asarray(check.violations(joined, n_ctx), dtype=bool)
        # Points without a full window of context are not judged yet.
        unjudged = max(0, need - n_ctx)
        if unjudged:
            mask = mask.copy()
            mask[: min(unjudged, mask.size)] = False
        self.judged += max(0, int(values.size) - unjudged)
        self.context = joined[-need:] if need else self.context
        bad = int(np.count_nonzero(mask))
        if not bad:  # the usual poll: nothing violates, no run of violations continues
            self.run = 0
            return
        self.violations += bad
        room = MAX_MARKED - len(self.marked)
        if room > 0:
            self.marked += tuple(int(s) for s in steps[mask][:room])
        where = np.flatnonzero(mask)
        runs, self.run = _runs_at(where, mask.size, self.run)
        if self.fail is None:
            fired = where[runs >= self.rule.for_]  # for_ >= 1: only violating points fire
            if fired.size:
                i = int(fired[0])
                self.fail = (int(steps[i]), float(values[i]))

    # ---- judging -----------------------------------------------------------------------
    def outcome(self, *, final: bool, ctx: EvalContext) -> Outcome:
        rule = self.rule
        axis = self.step_key or "step"
        if self.seen == 0:
            return self._absent(final, ctx)
        if self.period_error is not None:
            return Outcome(Status.ERROR, self.period_error)
        if rule.steps.kind in ("tail", "last"):
            if not final:
                return Outcome(
                    Status.PENDING, f"judged when the run ends ({rule.steps.describe()})"
                )
            return self._judge_tail(ctx)
        if rule.reduce is not Reduce.NONE:
            return self._reduced(final, axis)
        if self.error is not None:
            step, value, _ = self.error
            nonfinite = f"non-finite value {fmt(value)} at {axis} {step}"
            return self._at(Status.ERROR, nonfinite, step, value)
        if self.fail is not None:
            step, value = self.fail
            assert isinstance(rule.check, MaskCheck)
            streak = f" for {rule.for_} consecutive points" if rule.for_ > 1 else ""
            # fixed wording (no singular): alerts group runs by the message minus its
            # numbers, so the words must not change with the counts
            counts = f"({self.violations} of {self.judged} judged points violate)"
            explained = f"{rule.check.explain(value)} at {axis} {step}{streak} {counts}"
            return self._at(Status.FAIL, explained, step, value, self.violations)
        gap = self._selection_gap(axis)
        if gap:
            return Outcome(Status.ERROR if final else Status.PENDING, gap, judged=self.judged)
        if isinstance(rule.check, AggregateCheck):
            # live, an aggregate is judged as final once no future point can enter its
            # selection; until then it decides for itself what it may conclude
            done = final or self._selection_complete()
            return rule.check.outcome(self.agg_state, final=done, ctx=ctx)
        return self._passed(axis)

    def _selection_complete(self) -> bool:
        sel = self.rule.steps
        if sel.kind == "first":
            return self.first_taken
        if sel.kind == "list":
            return not self.missing_steps
        if sel.kind == "range" and sel.end is not None:
            return self.max_step is not None and self.max_step > sel.end
        return False

    def _passed(self, axis: str) -> Outcome:
        step, value = self.last if self.last else (None, None)
        what = f"{self.judged} point" + ("s" if self.judged != 1 else "")
        last = f"; last {fmt(value)} at {axis} {step}" if self.judged > 1 else ""
        if self.violations:  # debounced: violating points, never `for` of them in a row
            what = f"{self.judged - self.violations} of {what}"
            last += f"; {self.violations} violating, none for {self.rule.for_} in a row"
        within = f"{what} within {self.bound()}{last}"
        return self._at(Status.PASS, within, step, value, self.violations)

    def _at(
        self,
        status: Status,
        message: str,
        step: int | None,
        value: float | None,
        violations: int = 0,
    ) -> Outcome:
        """An outcome at one point of the rule's metric, with the count of points judged."""
        return Outcome(
            status, message, step=step, value=value, violations=violations, judged=self.judged
        )

    def _absent(self, final: bool, ctx: EvalContext) -> Outcome:
        idle = getattr(self.rule.check, "idle", None)  # a check that cannot judge here at all
        if idle is not None and (reason := idle(ctx)) is not None:
            return Outcome(Status.SKIP, reason)
        metric = self.rule.metric
        if not final:
            return Outcome(Status.PENDING, f"waiting for metric {metric}")
        summary = getattr(ctx.run, "summary_values", None) or {}
        if self.rule.expr is None and metric in summary:
            return self._judge_summary(summary[metric], ctx)
        available = list(getattr(ctx.run, "series", {}) or {})
        if self.rule.if_logged:
            inputs = self.rule.expr.metrics if self.rule.expr is not None else (metric,)
            absent = [m for m in inputs if m not in available]
            if absent:
                return Outcome(
                    Status.SKIP, f"metric {', '.join(absent)} not logged by this run (if_logged)"
                )
        if self.rule.expr is not None:
            from gatekeeper.expr import missing_inputs

            return Outcome(Status.ERROR, missing_inputs(self.rule.expr, available))
        if metric in available:  # named by the source (a wandb key, an empty series)
            return Outcome(Status.ERROR, f"metric {metric} is in the run but has no points")
        import difflib  # only for a missing metric's "did you mean"

        close = difflib.get_close_matches(metric, available, n=3, cutoff=0.6)
        hint = (
            f"; similar: {', '.join(close)}" if close
            else f"; the run has {len(available)} metrics"
        )
        return Outcome(Status.ERROR, f"metric {metric} is not in the run{hint}")

    def _judge_summary(self, value: float, ctx: EvalContext) -> Outcome:
        """A metric with no history points but a summary value (HF's `train_loss`): judged
        as one point without a step; a selection of steps cannot pick it."""
        if self.rule.steps.kind not in ("all", "first", "last", "tail"):
            return Outcome(
                Status.ERROR,
                f"metric {self.rule.metric} has only a summary value ({fmt(value)}, no steps); "
                f"steps {self.rule.steps.describe()} cannot select it",
            )
        single = RuleTracker(replace(self.rule, steps=ALL_STEPS))
        single.feed(np.zeros(1, np.int64), np.array([value], float), "summary")
        out = single.outcome(final=True, ctx=ctx)
        message = out.message.replace(" at summary 0", "")
        return replace(out, message=f"summary value (no step): {message}", step=None, value=value)

    def _has(self, axis: str) -> str:
        return f"{axis} has {self.min_step}..{self.max_step}"

    def _selection_gap(self, axis: str) -> str | None:
        sel = self.rule.steps
        if sel.kind == "list" and self.missing_steps:
            missing = ",".join(map(str, sorted(self.missing_steps)))
            return f"required {axis} {missing} missing ({self._has(axis)})"
        if self.selected == 0:
            return f"no points in steps {sel.describe()} ({self._has(axis)})"
        if (
            isinstance(self.rule.check, MaskCheck)
            and self.rule.reduce is Reduce.NONE
            and self.judged == 0
        ):
            need = self.rule.check.context() + 1
            return f"needs {need} points for its window, has {self.selected}"
        return None

    def _reduced(self, final: bool, axis: str) -> Outcome:
        rule = self.rule
        gap = self._selection_gap(axis)
        sel = rule.steps
        complete = final or (
            not gap
            and (
                (sel.kind == "list")
                or (sel.kind == "first")
                or (sel.kind == "range" and sel.end is not None and (self.max_step or 0) > sel.end)
            )
        )
        if gap and final:
            return Outcome(Status.ERROR, gap)
        if self.error is not None and not complete:
            # a NaN/Inf inside the selection makes the reduction an ERROR whatever comes
            # later: said at once, in the words the final reduction uses
            step, value, _ = self.error
            return self._nonfinite_in_reduction(axis, step, value)
        if not complete:
            return Outcome(
                Status.PENDING, f"{rule.reduce.value} judged once steps {sel.describe()} are in"
            )
        key = (self.selected, final)
        if self.reduced_memo is not None and self.reduced_memo[0] == key:
            return self.reduced_memo[1]
        outcome = self._reduce(axis)
        self.reduced_memo = (key, outcome)
        return outcome

    def _nonfinite_in_reduction(self, axis: str, step: int, value: float) -> Outcome:
        return Outcome(
            Status.ERROR,
            f"non-finite value {fmt(value)} at {axis} {step} inside the {self.rule.reduce.value}",
            step=step,
            value=value,
        )

    def _reduce(self, axis: str) -> Outcome:
        rule = self.rule
        values = np.concatenate(self.reduced)
        steps = np.concatenate(self.reduced_steps)
        span = f"{axis} {int(steps.min())}..{int(steps.max())}"
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            return self._nonfinite_in_reduction(axis, int(steps[i]), float(values[i]))
        value = float(_REDUCERS[rule.reduce](values))
        assert isinstance(rule.check, MaskCheck)
        violates = bool(rule.check.violations(np.array([value]), 0)[0])
        label = f"{rule.reduce.value} over {span} ({values.size} points)"
        if violates:
            return Outcome(
                Status.FAIL,
                f"{label}: {rule.check.explain(value)}",
                value=value,
                violations=1,
                judged=1,
            )
        return Outcome(
            Status.PASS,
            f"{label} = {fmt(value)} within {self.bound()}",
            value=value,
            judged=1,
        )

    def _judge_tail(self, ctx: EvalContext) -> Outcome:
        stopped = self._stopped_early()
        if stopped:
            return Outcome(Status.ERROR, stopped, step=self.max_step)
        n = self.rule.steps.count or 1
        steps = np.concatenate([s for s, _ in self.tail])[-n:]
        values = np.concatenate([v for _, v in self.tail])[-n:]
        tracker = RuleTracker(replace(self.rule, steps=ALL_STEPS))
        tracker.feed(steps, values, self.step_key or "step")
        self.span, self.marked = tracker.span, tracker.marked
        return tracker.outcome(final=True, ctx=ctx)


    def _stopped_early(self) -> str | None:
        """A `last` selection judges the run's end: a metric whose points stop well before
        the run's last step on the same axis would be judged on a stale point."""
        last, axis_last = self.max_step, self.axis_last
        if last is None or axis_last is None or axis_last - last <= self.max_gap:
            return None
        axis = self.step_key or "step"
        return (
            f"steps {self.rule.steps.describe()}: {self.rule.metric}'s points end at {axis} "
            f"{last}, but the run reaches {axis} {axis_last}; its last value is not the "
            "run's (the metric stopped being logged, or its values were dropped)"
        )


class Evaluation:
    """Rule trackers for a set of policies on one run; feed new points, ask for a verdict."""

    def __init__(self, policies: Iterable[PolicySpec]):
        self.policies = list(policies)
        self.trackers: list[RuleTracker] = [RuleTracker(r) for p in self.policies for r in p.rules]
        self.by_metric: dict[str, list[RuleTracker]] = {}
        self.derived: list[tuple[Aligner, RuleTracker]] = []  # expr rules: inputs aligned first
        self.axis_last: dict[str, int] = {}  # step axis -> last step of any metric on it
        for tracker in self.trackers:
            if tracker.rule.expr is not None:
                from gatekeeper.expr import Aligner

                self.derived.append((Aligner(tracker.rule.expr), tracker))
            else:
                self.by_metric.setdefault(tracker.rule.metric, []).append(tracker)

    # ---- state as data -----------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """What has been fed, as plain data: per rule its tracker, per derived rule its
        aligner's buffered inputs, and the last step of each step axis."""
        return {
            "rules": [{"key": t.rule.key, "tracker": t.to_state()} for t in self.trackers],
            "aligners": [a.to_state() for a, _ in self.derived],
            "axis_last": dict(self.axis_last),
        }

    @classmethod
    def from_state(cls, policies: Iterable[PolicySpec], data: Any) -> Evaluation:
        """An Evaluation of `policies` holding what `to_state` saved (StateDataError when
        the data does not fit these policies' rules)."""
        ev = cls(policies)
        if not isinstance(data, dict) or set(data) != {"rules", "aligners", "axis_last"}:
            raise StateDataError("evaluation: expected a mapping of rules, aligners, axis_last")
        rules, aligners = data["rules"], data["aligners"]
        if not isinstance(rules, list) or not isinstance(aligners, list):
            raise StateDataError("evaluation: rules and aligners must be lists")
        if len(rules) != len(ev.trackers) or len(aligners) != len(ev.derived):
            raise StateDataError("evaluation: its rules are not these policies' rules")
        for i, (tracker, saved) in enumerate(zip(ev.trackers, rules, strict=True)):
            where = f"evaluation.rules[{i}]"
            if not isinstance(saved, dict) or saved.get("key") != tracker.rule.key:
                raise StateDataError(f"{where}: not rule {tracker.rule.key}")
            tracker.restore(saved.get("tracker"), f"{where}.tracker")
        for i, ((aligner, _), saved) in enumerate(zip(ev.derived, aligners, strict=True)):
            aligner.restore(saved, f"evaluation.aligners[{i}]")
        ev.axis_last = decode(data["axis_last"], dict[str, int], "evaluation.axis_last")
        return ev

    def feed(self, series: Mapping[str, Series]) -> None:
        """Fold new points (per metric, sorted by step) into every rule that reads them."""
        for part in series.values():
            if len(part):
                hi = int(part.steps[-1])
                self.axis_last[part.step_key] = max(self.axis_last.get(part.step_key, hi), hi)
        shapes: dict[int, tuple[int, int, int]] = {}  # by steps array: a row's metrics share one
        for metric, trackers in self.by_metric.items():
            s = series.get(metric)
            if s is not None and len(s):
                shape = shapes.get(id(s.steps))  # once per steps array, not per rule
                if shape is None:
                    shape = shapes[id(s.steps)] = step_shape(s.steps)
                finite = bool(np.isfinite(s.values).all())
                for tracker in trackers:
                    tracker.feed(s.steps, s.values, s.step_key, shape, finite)
        for aligner, tracker in self.derived:
            new = aligner.feed(series)
            if new is not None:
                tracker.feed(new[0], new[1], aligner.step_key or "step")

    def verdict(
        self,
        run: Run,
        *,
        final: bool,
        history: Any = None,
        now: float | None = None,
        arrivals: Mapping[str, float] | None = None,
        references: Mapping[str, Run] | None = None,
    ) -> Verdict:
        """`now` and `arrivals` (metric -> wall time its last new point arrived) come from
        a live watcher, for `stale` rules; without them those rules are skipped.
        `references` are earlier runs by name, for `isclose` rules."""
        arrivals = arrivals or {}
        results: list[RuleResult] = []
        skip_reason = {p.name: _policy_mismatch(p, run) for p in self.policies}
        unset = {p.name: missing_config(p, run) for p in self.policies}
        for tracker in self.trackers:
            rule = tracker.rule
            outcome = _applicability(rule, run, skip_reason[rule.policy], unset[rule.policy])
            overlay = None
            if outcome is None:
                outcome = metric_error(rule, run)
            if outcome is None:
                tracker.bind(run)
                arrival = arrivals.get(rule.metric)
                rule_ctx = _context(  # built directly: replace() costs ~10 us a rule
                    run=run, history=history, rule_key=rule.key, now=now,
                    last_arrival=arrival, metric=rule.metric, references=references,
                )
                tracker.axis_last = self.axis_last.get(tracker.step_key or "")
                outcome = tracker.outcome(final=final, ctx=rule_ctx)
                if isinstance(rule.check, AggregateCheck) and outcome.status is not Status.SKIP:
                    overlay = rule.check.overlay(tracker.agg_state, rule_ctx)
            results.append(_result(rule, outcome, tracker, overlay))
        allowed = {  # states relaxed by the enforce-mode policies that apply to this run
            state: f"policy {p.name}: {reason}"
            for p in self.policies
            if p.mode is Mode.ENFORCE and skip_reason[p.name] is None
            for state, reason in p.allow_states.items()
        }
        ended = run_state_result(run, final=final, allowed=allowed)  # how the run ended
        if ended is not None:
            results.append(ended)
        nothing = _nothing_allowed(self.policies, run)
        return Verdict(run=run.summary(), results=results, final=final, nothing_allowed=nothing)


def evaluate(
    policies: Iterable[PolicySpec],
    run: Run,
    *,
    final: bool = True,
    history: Any = None,
    references: Mapping[str, Run] | None = None,
) -> Verdict:
    """Judge a whole run against the policies."""
    ev = Evaluation(policies)
    ev.feed(run.series)
    return ev.verdict(run, final=final, history=history, references=references)


def _context(**values: Any) -> EvalContext:
    """`EvalContext(**values)` given every field, without the frozen dataclass's
    `object.__setattr__` per field (~2 us a rule on every verdict); equal to it in every
    way (tests/test_engine.py pins that)."""
    ctx = object.__new__(EvalContext)
    ctx.__dict__.update(values)
    return ctx


def _nothing_allowed(policies: Iterable[PolicySpec], run: Run) -> str | None:
    """Why a verdict that judges no gating rule may pass: the flag, else an enforce-mode
    policy's `allow_nothing_judged` -- whether or not its `match:` holds, as a policy
    that does not apply to this run is the usual reason nothing was judged."""
    if run.allow_nothing_judged is not None:
        return run.allow_nothing_judged
    for p in policies:
        if p.mode is Mode.ENFORCE and p.allow_nothing_judged is not None:
            return f"policy {p.name}: {p.allow_nothing_judged}"
    return None


def _policy_mismatch(policy: PolicySpec, run: Run) -> str | None:
    match = policy.match
    if match is None:
        return None
    if match.tags and not set(match.tags) & set(run.tags):
        return f"policy {policy.name} applies to runs tagged {', '.join(match.tags)}"
    if match.name and not fnmatch.fnmatchcase(run.name, match.name):
        return f"policy {policy.name} applies to runs named {match.name!r}, not {run.name!r}"
    if match.config:
        wanted = {f"config.{k}": v for k, v in match.config.items()}
        failing = first_failing(parse_conditions(wanted), run)
        if failing is not None:
            return f"policy {policy.name} applies when {failing.describe()}"
    return None


def _applicability(
    rule: RuleSpec, run: Run, mismatch: str | None, unset: str | None = None
) -> Outcome | None:
    if mismatch:
        return Outcome(Status.SKIP, mismatch)
    if rule.off:
        return Outcome(Status.SKIP, f"switched off by override: {rule.override}")
    if unset:  # before `when`: a variant must not be skipped on a key the run lacks
        return Outcome(Status.ERROR, unset)
    failing = first_failing(list(rule.conditions), run)
    if failing is not None:
        found, value = run.lookup(failing.key)
        has = f"run has {value!r}" if found else "run does not set it"
        return Outcome(Status.SKIP, f"not applicable: needs {failing.describe()} ({has})")
    return None


def _plot(tracker: RuleTracker, overlay: dict[str, list[float]] | None) -> dict[str, Any]:
    """What a plot of the rule needs beyond the outcome: bound parameters, the judged
    selection and the violating steps (reporters draw; the engine only records)."""
    if tracker.plot_params is None:  # dumped once: a live verdict is asked on every poll
        check = tracker.rule.check
        tracker.plot_params = {"kind": check.kind, **check.model_dump(mode="json")}
    violating: tuple[int, ...] = tracker.marked  # ints already (_judge_finite, decode)
    if overlay is not None:  # an aggregate check's own violating steps (history: drifting)
        overlay = dict(overlay)
        drift = overlay.pop("drift", None) or []
        violating = tuple(int(s) for s in (tracker.marked or drift))
    return {
        "check": dict(tracker.plot_params),  # each result its own copy
        "span": tracker.span,
        "violating_steps": violating,
        "overlay": overlay,
    }


def _result(
    rule: RuleSpec, out: Outcome, tracker: RuleTracker, overlay: dict[str, list[float]] | None
) -> RuleResult:
    status = out.status
    if status is Status.FAIL and rule.severity is Severity.WARN:
        status = Status.WARN
    return RuleResult.of(  # every field given: no per-field frozen setattr
        policy=rule.policy,
        rule=rule.id,
        status=status,
        severity=rule.severity,
        mode=rule.mode,
        metric=rule.metric,
        message=out.message,
        source=rule.source,
        step=out.step,
        step_key=tracker.step_key,
        value=out.value,
        expected=tracker.expected(),
        override=rule.override,
        description=rule.description,
        violations=out.violations,
        judged=out.judged,
        **_plot(tracker, overlay),
    )
