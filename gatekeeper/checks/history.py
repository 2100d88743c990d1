"""`history: {rel_up: 0.2, rel_down: 0.2}` — drift against the run series' own trusted past
(miles' metric-history gate): each selected point must lie in the corridor
`[ref - max(rel_down*|ref|, abs_floor_down), ref + max(rel_up*|ref|, abs_floor_up)]`
around ref = mean of its coordinate's newest `last_n` trusted values. `k_std` widens
each side to at least k times the std of that history (self-calibrating bands). Bands
scale from the reference only, so a drifting value cannot widen its own tolerance.
A coordinate with no trusted history yet is inactive: reported, never a failure.
The store is read before evaluation and handed in through `EvalContext.history`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome
from gatekeeper.checks.baseline import RuleBaseline
from gatekeeper.fmt import fmt, plural
from gatekeeper.verdict import Status

INACTIVE = "inactive:"  # message prefix of a rule with no baseline to judge against
OVERLAY_POINTS = 500


@dataclass
class HistoryState:
    """The selected finite points; the gate records them once the run is judged."""

    steps: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    # (points fed, baseline) -> its Judgement: a verdict asks twice (outcome, plot overlay)
    memo: tuple[int, RuleBaseline | None, Judgement] | None = None

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.steps:
            return np.empty(0, np.int64), np.empty(0)
        if len(self.steps) > 1:  # joined once: a verdict reads them several times
            self.steps, self.values = [np.concatenate(self.steps)], [np.concatenate(self.values)]
        return self.steps[0], self.values[0]


@dataclass(frozen=True)
class Judged:
    """One judged coordinate."""

    step: int  # the run's own step
    value: float
    ref: float
    lo: float
    hi: float
    n: int  # trusted values the reference is the mean of

    def corridor(self) -> str:
        return f"[{fmt(self.lo)}, {fmt(self.hi)}] (ref {fmt(self.ref)} = mean of {self.n} trusted)"


@dataclass(frozen=True)
class Judgement:
    """Every active coordinate of a rule, as arrays, and how many were inactive."""

    steps: np.ndarray
    values: np.ndarray
    ref: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n: np.ndarray
    inactive: int

    @cached_property  # a verdict asks twice (outcome, plot overlay)
    def _bad(self) -> np.ndarray:
        below = self.values < self.lo
        return np.logical_or(below, self.values > self.hi, out=below)

    def bad(self) -> np.ndarray:
        return self._bad

    def at(self, i: int) -> Judged:
        return Judged(
            int(self.steps[i]),
            float(self.values[i]),
            float(self.ref[i]),
            float(self.lo[i]),
            float(self.hi[i]),
            int(self.n[i]),
        )


def duplicate_step(state: HistoryState) -> int | None:
    """The first step selected twice, if any (points arrive sorted by step)."""
    steps, _ = state.points()
    if steps.size < 2 or bool(np.all(steps[1:] > steps[:-1])):  # the usual: increasing
        return None
    ordered = np.sort(steps)
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    return int(ordered[same[0]]) if same.size else None


class History(AggregateCheck):
    kind = "history"
    context_fields = ("history", "rule_key")
    reads = "history"
    rel_up: float | None = Field(default=None, ge=0)
    rel_down: float | None = Field(default=None, ge=0)
    abs_floor_up: float | None = Field(default=None, ge=0)
    abs_floor_down: float | None = Field(default=None, ge=0)
    k_std: float | None = Field(default=None, gt=0)
    last_n: int = Field(default=20, ge=1)
    min_history: int = Field(default=1, ge=1)
    # Run metadata that decides which runs share a baseline (e.g. miles' test_path,
    # backend, suite); `--series-key` overrides it. Not part of the coordinate.
    series: list[str] | None = Field(default=None, min_length=1)

    @classmethod
    def from_shorthand(cls, value: Any) -> dict[str, Any]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"rel_up": value, "rel_down": value}
        raise ValueError(f"history takes a relative band like 0.2 or a mapping, got {value!r}")

    @model_validator(mode="after")
    def _both_sides(self) -> History:
        # An all-default side has band 0 and fails on any deviation: make the author say it.
        if self.k_std is None:
            for side in ("up", "down"):
                if (
                    getattr(self, f"rel_{side}") is None
                    and getattr(self, f"abs_floor_{side}") is None
                ):
                    raise ValueError(
                        f"history needs a band on the {side} side: rel_{side} and/or "
                        f"abs_floor_{side} (or k_std for both)"
                    )
        return self

    def bands(self, ref: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper band widths for references `ref` with history std `std`."""
        # no k_std: no std term (0 * an overflowed std would be NaN, a corridor nothing
        # falls outside of)
        k = self.k_std * std if self.k_std is not None else None
        size = np.abs(ref)
        # np.maximum of arrays and scalars: the same values as stacking full arrays; in
        # place, so no step allocates (and faults in) another array of every coordinate.
        # rel * |ref| is +0, positive or NaN (`or 0.0` turns a -0.0 into 0.0), so a
        # maximum with an absent floor or std term (0.0) would change nothing: skipped.
        up = np.multiply(self.rel_up or 0.0, size)
        down = np.multiply(self.rel_down or 0.0, size, out=size)
        for band, floor in ((up, self.abs_floor_up), (down, self.abs_floor_down)):
            if floor:
                np.maximum(band, floor, out=band)
            if k is not None:
                np.maximum(band, k, out=band)
        return down, up

    def describe(self) -> str:
        parts = []
        for side, sign in (("up", "+"), ("down", "-")):
            terms = [
                f"{fmt(r)}*|ref|" if (r := getattr(self, f"rel_{side}")) is not None else None,
                fmt(a) if (a := getattr(self, f"abs_floor_{side}")) is not None else None,
                f"{fmt(self.k_std)}*std" if self.k_std is not None else None,
            ]
            given = [t for t in terms if t is not None]
            parts.append(
                f"ref {sign} max({', '.join(given)})"
                if len(given) > 1
                else f"ref {sign} {given[0]}"
            )
        return f"{parts[1]} <= x <= {parts[0]}, ref = mean of newest {self.last_n} trusted"

    def start(self) -> HistoryState:
        return HistoryState()

    def idle(self, ctx: EvalContext) -> str | None:
        """Without a store a history rule judges nothing, so a metric this run does not log
        is no error either: a pack of history rules is inert until `--history` is given."""
        if ctx.history is not None:
            return None
        return f"{INACTIVE} no baseline store given (check --history URL)"

    def points(self, state: HistoryState) -> tuple[np.ndarray, np.ndarray]:
        """The selected points so far: what the run records in the store."""
        return state.points()

    def feed(self, state: HistoryState, steps: np.ndarray, values: np.ndarray) -> HistoryState:
        state.steps.append(steps)
        state.values.append(values)
        return state

    def judge(self, state: HistoryState, baseline: RuleBaseline | None) -> Judgement:
        """Each selected point against its coordinate's corridor, vectorized (remembered
        until a point is fed or the baseline changes)."""
        fed = sum(s.size for s in state.steps)
        memo = state.memo
        if memo is not None and memo[0] == fed and memo[1] is baseline:
            return memo[2]
        judged = self._judge(state, baseline)
        state.memo = (fed, baseline, judged)
        return judged

    def _judge(self, state: HistoryState, baseline: RuleBaseline | None) -> Judgement:
        steps, values = state.points()
        coords = np.arange(-steps.size, 0) if baseline and baseline.positional else steps
        stats = baseline.stats(self.last_n) if baseline is not None else None
        if stats is None or not stats.steps.size:
            empty = np.empty(0)
            return Judgement(steps[:0], empty, empty, empty, empty, empty, int(steps.size))
        if (
            coords.size == stats.steps.size
            and np.array_equal(coords, stats.steps)
            and bool(np.all(stats.count >= self.min_history))
        ):  # the usual: the run has the baseline's steps, all active; no gathering
            pos: np.ndarray | slice = slice(None)
            inactive = 0
        else:
            where = np.clip(np.searchsorted(stats.steps, coords), 0, stats.steps.size - 1)
            found = stats.steps[where] == coords
            where = where[found]
            active = found.copy()
            active[found] = stats.count[where] >= self.min_history
            pos = where[stats.count[where] >= self.min_history]
            steps, values = steps[active], values[active]
            inactive = int(active.size - active.sum())
        ref, std = stats.ref[pos], stats.std[pos]
        down, up = self.bands(ref, std)
        lo = np.subtract(ref, down, out=down)
        hi = np.add(ref, up, out=up)
        return Judgement(steps, values, ref, lo, hi, stats.count[pos], inactive)

    def overlay(self, state: HistoryState, ctx: EvalContext) -> dict[str, list[float]] | None:
        """The corridor and reference at the judged steps (at most OVERLAY_POINTS of them,
        evenly spaced, every drifting one kept) for plots."""
        if ctx.history is None:
            return None
        j = self.judge(state, ctx.history.get(ctx.rule_key))
        if not j.steps.size:
            return None
        bad = j.bad()
        pick = np.unique(
            np.concatenate(
                [
                    np.linspace(0, j.steps.size - 1, min(j.steps.size, OVERLAY_POINTS)).astype(
                        np.int64
                    ),
                    np.flatnonzero(bad)[:OVERLAY_POINTS],
                ]
            )
        )
        return {
            "steps": j.steps[pick].tolist(),
            "ref": j.ref[pick].tolist(),
            "lo": j.lo[pick].tolist(),
            "hi": j.hi[pick].tolist(),
            "drift": j.steps[bad][:OVERLAY_POINTS].tolist(),
        }

    def outcome(self, state: HistoryState, *, final: bool, ctx: EvalContext) -> Outcome:
        if ctx.history is None:
            return Outcome(Status.SKIP, f"{INACTIVE} no baseline store given (check --history URL)")
        dup = duplicate_step(state)
        if dup is not None:
            # miles' gate: "all: duplicate step k in series" is an ERROR (one value per
            # coordinate), judged before the baseline.
            return Outcome(
                Status.ERROR,
                f"duplicate step {dup} in the series: a coordinate holds one value per run",
                step=dup,
            )
        j = self.judge(state, ctx.history.get(ctx.rule_key))
        if not j.steps.size:
            return Outcome(
                Status.SKIP,
                f"{INACTIVE} no trusted history yet for {plural(j.inactive, 'coordinate')} "
                f"({getattr(ctx.history, 'store', '')}); a trusted run seeds the baseline",
            )
        idle = f"; {j.inactive} inactive (no trusted history)" if j.inactive else ""
        unusable = ~(np.isfinite(j.lo) & np.isfinite(j.hi))
        if unusable.any():  # a NaN bound passes every value: never judge against one
            b = j.at(int(np.argmax(unusable)))
            return Outcome(
                Status.ERROR,
                f"the baseline at step {b.step} is not finite: corridor {b.corridor()}; its "
                f"trusted values overflow float64 arithmetic, so "
                f"{int(unusable.sum())} of {j.steps.size} coordinates cannot be judged",
                step=b.step,
                value=b.value,
            )
        bad = j.bad()
        n_bad, n = int(bad.sum()), int(j.steps.size)
        if n_bad:
            b = j.at(int(np.argmax(bad)))
            side = "above" if b.value > b.hi else "below"
            return Outcome(
                Status.FAIL,
                f"x = {fmt(b.value)} at step {b.step} is {side} its corridor {b.corridor()}; "
                f"{n_bad} of {n} coordinates drift{idle}",
                step=b.step,
                value=b.value,
                violations=n_bad,
                judged=n,
            )
        last = j.at(n - 1)
        return Outcome(
            Status.PASS,
            f"{plural(n, 'coordinate')} within {'its corridor' if n == 1 else 'their corridors'}; "
            f"step {last.step}: "
            f"{fmt(last.value)} in {last.corridor()}{idle}",
            step=last.step,
            value=last.value,
            judged=n,
        )
