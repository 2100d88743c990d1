"""`isclose: {reference: NAME, rel_tol: r, abs_tol: a}` — at every judged step the value
agrees with the same metric of an earlier run at the same step, by Python's
`math.isclose`: |x - ref| <= max(r * max(|x|, |ref|), a). miles' grad-norm replay
(`--ci-save-grad-norm` in one run, `--ci-load-grad-norm` in the next) asserts exactly this
with r = a = 0.03 at every step.

The reference run is read at the edge (`check --reference NAME=SOURCE`: a saved record
file, a run directory, a wandb run) and handed in through `EvalContext.references`; the
check does no I/O. A judged step the reference lacks is ERROR (miles' replay finds no
saved file for it and fails); reference steps the run never reached are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import Field

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
from gatekeeper.checks.conclusion import failed
from gatekeeper.fmt import fmt
from gatekeeper.verdict import Status


@dataclass
class _CloseState:
    fresh: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # not yet compared
    judged: int = 0
    worst: tuple[int, float, float] | None = None  # step, value, ref of the largest |x - ref|
    worst_gap: float = -1.0
    fail: tuple[int, float, float] | None = None  # first step outside tolerance
    error: Outcome | None = None


class IsClose(AggregateCheck):
    kind = "isclose"
    context_fields = ("references", "metric")
    reads = "references"
    reference: str = Field(min_length=1)
    rel_tol: float = Field(default=1e-9, ge=0)  # math.isclose's defaults
    abs_tol: float = Field(default=0.0, ge=0)

    @classmethod
    def from_shorthand(cls, value: object) -> dict[str, object]:
        if isinstance(value, str):
            return {"reference": value}
        raise ValueError("isclose takes {reference: NAME, rel_tol: r, abs_tol: a}")

    def describe(self) -> str:
        return (
            f"isclose(x, {self.reference}, rel_tol={fmt(self.rel_tol)}, "
            f"abs_tol={fmt(self.abs_tol)})"
        )

    def start(self) -> _CloseState:
        return _CloseState()

    def feed(self, state: _CloseState, steps: np.ndarray, values: np.ndarray) -> _CloseState:
        if state.error is None and state.fail is None:  # once decided, no point is compared
            state.fresh.append((steps, values))
        return state

    def outcome(self, state: _CloseState, *, final: bool, ctx: EvalContext) -> Outcome:
        if state.error is None and state.fail is None and state.fresh:
            self._compare(state, ctx)
            state.fresh = []
        if state.error is not None:
            return state.error
        if state.fail is not None:
            step, value, ref = state.fail
            vs = f"x = {fmt(value)} vs {self.reference} {fmt(ref)} at step {step}"
            gap = f"|x - ref| = {fmt(abs(value - ref))} > {fmt(self._tolerance(value, ref))}"
            return failed(f"{vs}: {gap}", step, value, state.judged)
        worst = ""
        if state.worst is not None:
            step, value, ref = state.worst
            worst = (
                f"; largest gap {fmt(abs(value - ref))} at step {step} "
                f"({fmt(value)} vs {fmt(ref)})"
            )
        return Outcome(
            Status.PASS,
            f"{state.judged} points close to {self.reference}{worst}",
            judged=state.judged,
        )

    def _decide(
        self,
        state: _CloseState,
        ctx: EvalContext,
        i: int,
        steps: np.ndarray,
        values: np.ndarray,
        expected: np.ndarray,
        absent: np.ndarray,
    ) -> None:
        """Point `i` decides: its reference is missing or not finite (ERROR), else it is
        out of tolerance (FAIL). The points before it were judged close; none after it is
        compared (as a live poll stops at it)."""
        step = int(steps[i])
        if absent[i]:
            state.judged += i
            state.error = Outcome(
                Status.ERROR,
                f"reference {self.reference} has no {ctx.metric} at step {step}",
                step=step,
                value=float(values[i]),
            )
        elif not np.isfinite(expected[i]):
            state.judged += i
            state.error = Outcome(
                Status.ERROR,
                f"reference {self.reference} has non-finite {fmt(float(expected[i]))} at step "
                f"{step}",
                step=step,
            )
        else:
            state.judged += i + 1
            state.fail = (step, float(values[i]), float(expected[i]))

    def _tolerance(self, a: float, b: float) -> float:
        return max(self.rel_tol * max(abs(a), abs(b)), self.abs_tol)

    def _reference(self, ctx: EvalContext) -> tuple[np.ndarray, np.ndarray] | Outcome:
        refs = ctx.references or {}
        run = refs.get(self.reference)
        if run is None:
            return Outcome(
                Status.ERROR,
                f"reference run {self.reference!r} not given; pass "
                f"--reference {self.reference}=PATH (the earlier run's record or directory)",
            )
        reason = getattr(run, "metric_errors", {}).get(ctx.metric)
        if reason is not None:
            return Outcome(Status.ERROR, f"reference {self.reference}: {ctx.metric}: {reason}")
        series = run.series.get(ctx.metric)
        if series is None or not len(series):
            return Outcome(
                Status.ERROR, f"reference {self.reference} ({run.source}) has no {ctx.metric}"
            )
        return series.steps, series.values

    def _compare(self, state: _CloseState, ctx: EvalContext) -> None:
        ref = self._reference(ctx)
        if isinstance(ref, Outcome):
            state.error = ref
            return
        ref_steps, ref_values = ref
        steps = np.concatenate([s for s, _ in state.fresh])
        values = np.concatenate([v for _, v in state.fresh])
        at = np.clip(np.searchsorted(ref_steps, steps), 0, len(ref_steps) - 1)
        expected = ref_values[at]
        absent = ref_steps[at] != steps
        unjudged = absent | ~np.isfinite(expected)  # the reference cannot judge the point
        with np.errstate(invalid="ignore", over="ignore"):  # where unjudged: not read
            gap = np.abs(values - expected)
            tol = np.maximum(
                self.rel_tol * np.maximum(np.abs(values), np.abs(expected)), self.abs_tol)
        decides = unjudged | (gap > tol)
        if decides.any():  # the first point in step order that decides, whatever the polls
            self._decide(state, ctx, int(np.argmax(decides)), steps, values, expected, absent)
            return
        state.judged += int(values.size)
        j = int(np.argmax(gap))
        if gap[j] > state.worst_gap:
            state.worst_gap = float(gap[j])
            state.worst = (int(steps[j]), float(values[j]), float(expected[j]))
