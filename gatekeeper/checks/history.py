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
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from gatekeeper.checks.base import AggregateCheck, EvalContext, Outcome, fmt
from gatekeeper.verdict import Status


INACTIVE = "inactive:"  # message prefix of a rule with no baseline to judge against


@dataclass
class HistoryState:
    """The selected finite points; the gate records them once the run is judged."""

    steps: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.steps:
            return np.empty(0, np.int64), np.empty(0)
        return np.concatenate(self.steps), np.concatenate(self.values)


@dataclass(frozen=True)
class Judged:
    step: int  # the run's own step
    value: float
    ref: float
    lo: float
    hi: float
    n: int  # trusted values the reference is the mean of

    @property
    def ok(self) -> bool:
        return self.lo <= self.value <= self.hi

    def corridor(self) -> str:
        return f"[{fmt(self.lo)}, {fmt(self.hi)}] (ref {fmt(self.ref)} = mean of {self.n} trusted)"


class History(AggregateCheck):
    kind = "history"
    rel_up: float | None = Field(default=None, ge=0)
    rel_down: float | None = Field(default=None, ge=0)
    abs_floor_up: float | None = Field(default=None, ge=0)
    abs_floor_down: float | None = Field(default=None, ge=0)
    k_std: float | None = Field(default=None, gt=0)
    last_n: int = Field(default=20, ge=1)
    min_history: int = Field(default=1, ge=1)

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
        k = (self.k_std or 0.0) * std
        up = np.maximum.reduce(
            [(self.rel_up or 0.0) * np.abs(ref), np.full_like(ref, self.abs_floor_up or 0.0), k]
        )
        down = np.maximum.reduce(
            [(self.rel_down or 0.0) * np.abs(ref), np.full_like(ref, self.abs_floor_down or 0.0), k]
        )
        return down, up

    def describe(self) -> str:
        parts = []
        for side, sign in (("up", "+"), ("down", "-")):
            terms = [
                f"{fmt(r)}*|ref|" if (r := getattr(self, f"rel_{side}")) is not None else None,
                fmt(a) if (a := getattr(self, f"abs_floor_{side}")) is not None else None,
                f"{fmt(self.k_std)}*std" if self.k_std is not None else None,
            ]
            terms = [t for t in terms if t]
            parts.append(
                f"ref {sign} max({', '.join(terms)})"
                if len(terms) > 1
                else f"ref {sign} {terms[0]}"
            )
        return f"{parts[1]} <= x <= {parts[0]}, ref = mean of newest {self.last_n} trusted"

    def start(self) -> HistoryState:
        return HistoryState()

    def feed(self, state: HistoryState, steps: np.ndarray, values: np.ndarray) -> HistoryState:
        state.steps.append(steps)
        state.values.append(values)
        return state

    def judge(self, state: HistoryState, ctx: EvalContext) -> tuple[list[Judged], int]:
        """Judged active coordinates and how many were inactive (no trusted history)."""
        baseline = ctx.history.get(ctx.rule_key) if ctx.history is not None else None
        steps, values = state.points()
        if baseline is None:
            return [], int(steps.size)
        coords = np.arange(-steps.size, 0) if baseline.positional else steps
        judged: list[Judged] = []
        for step, coord, value in zip(
            steps.tolist(), coords.tolist(), values.tolist(), strict=True
        ):
            past = baseline.values.get(coord, [])[: self.last_n]
            if len(past) < self.min_history:
                continue
            arr = np.asarray(past, dtype=np.float64)
            ref, std = np.array([arr.mean()]), np.array([arr.std()])
            down, up = self.bands(ref, std)
            r = float(ref[0])
            judged.append(Judged(step, value, r, r - float(down[0]), r + float(up[0]), len(past)))
        return judged, int(steps.size) - len(judged)

    def outcome(self, state: HistoryState, *, final: bool, ctx: EvalContext) -> Outcome:
        judged, inactive = self.judge(state, ctx)
        if ctx.history is None:
            return Outcome(Status.SKIP, f"{INACTIVE} no baseline store given (check --history URL)")
        if not judged:
            return Outcome(
                Status.SKIP,
                f"{INACTIVE} no trusted history yet for {inactive} coordinate(s) "
                f"({getattr(ctx.history, 'store', '')}); a trusted run seeds the baseline",
            )
        idle = f"; {inactive} inactive (no trusted history)" if inactive else ""
        bad = [j for j in judged if not j.ok]
        if bad:
            b = bad[0]
            side = "above" if b.value > b.hi else "below"
            return Outcome(
                Status.FAIL,
                f"x = {fmt(b.value)} at step {b.step} is {side} its corridor {b.corridor()}; "
                f"{len(bad)} of {len(judged)} coordinates drift{idle}",
                step=b.step,
                value=b.value,
                violations=len(bad),
                judged=len(judged),
            )
        last = judged[-1]
        return Outcome(
            Status.PASS,
            f"{len(judged)} coordinate(s) within their corridors; step {last.step}: "
            f"{fmt(last.value)} in {last.corridor()}{idle}",
            step=last.step,
            value=last.value,
            judged=len(judged),
        )
