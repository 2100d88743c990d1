"""The points a `present_at` rule judges (checks/present_at.py): one per round -- a step
at which a metric matching `steps_of` has a point, on that metric's step axis, and no
metric matching `unless` has one -- valued 1 where the rule's metric has a point at that
step, 0 where it has none.

A round is settled once a later step of its axis has been fed (rows arrive whole), or at
the end of the run (`flush`), so a live verdict and a whole-run verdict judge the same
rounds. The axis' last step is the evaluation's (`axis_last`: every metric on the axis,
whenever fed): counted here, a point of the rule's metric fed before the axis was known,
or ahead of it in a poll, was left out of it, and a poll settled fewer rounds than
`check` (the fourteenth session's random audit).

The axis is that of the first `steps_of` metric fed. Points of the rule's metric or of an
`unless` metric fed before it are kept by their own axis (`early`) and join the rounds'
only once the axis is known: taken whatever their axis, a metric on another axis fed
first counted as present where `check`, which knows the axis from the start, judged it
absent (a PASS live, a FAIL in `check`), and `unless` points fed first were dropped
(found in the sixteenth session). An early step below its axis' last step can no longer
be a round (rows arrive whole) and is forgotten, so what it keeps is the unsettled
rounds: a few steps, not the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gatekeeper.model import Series
from gatekeeper.policy.patterns import any_match
from gatekeeper.statedata import StateDataError, decode

Points = tuple[np.ndarray, np.ndarray, str]  # steps, values (1 present, 0 absent), step axis


class Rounds:
    """Rounds of one present_at rule on metric `metric`, fed chunk by chunk."""

    def __init__(self, metric: str, steps_of: tuple[str, ...], unless: tuple[str, ...]):
        self.metric, self.steps_of, self.unless = metric, steps_of, unless
        self.axis: str | None = None  # the step axis of the first `steps_of` point
        self.rounds: set[int] = set()  # unsettled round steps
        self.skipped: set[int] = set()  # unsettled steps an `unless` metric marks
        self.present: set[int] = set()  # unsettled steps the rule's metric has a point at
        self.horizon: int | None = None  # the axis' last step as of the last feed
        # before the axis is known: per step axis, the steps the rule's metric and the
        # `unless` metrics have points at (present, skipped)
        self.early: dict[str, tuple[set[int], set[int]]] = {}
        self._names: dict[str, tuple[bool, bool]] = {}  # name -> (steps_of, unless) match

    def _roles(self, name: str) -> tuple[bool, bool]:
        roles = self._names.get(name)
        if roles is None:
            roles = self._names[name] = (
                any_match(self.steps_of, name), any_match(self.unless, name)
            )
        return roles

    def feed(self, series: Mapping[str, Series], axis_last: Mapping[str, int]) -> Points | None:
        """Fold new points; the newly settled rounds, if any. `axis_last`: the last step
        of every step axis fed so far, these points included."""
        if self.axis is None:  # the first `steps_of` metric's axis, whatever the order
            self.axis = next((s.step_key for name, s in series.items()
                              if len(s) and self._roles(name)[0]), None)
            if self.axis is not None:
                present, skipped = self.early.pop(self.axis, (set(), set()))
                self.present |= present
                self.skipped |= skipped
                self.early.clear()
        for name, s in series.items():
            if len(s):
                self._fold(name, s)
        if self.axis is None:
            self._forget_early(axis_last)
            return None
        self.horizon = axis_last.get(self.axis, self.horizon)
        return self._settle(self.horizon)

    def _fold(self, name: str, s: Series) -> None:
        of, unless = self._roles(name)
        mine = name == self.metric
        if self.axis is not None and s.step_key != self.axis:
            return
        steps = {int(x) for x in s.steps}
        if self.axis is None:  # no `steps_of` point yet: kept by axis until one comes
            if mine or unless:
                present, skipped = self.early.setdefault(s.step_key, (set(), set()))
                if mine:
                    present |= steps
                if unless:
                    skipped |= steps
            return
        if of:
            self.rounds |= steps
        if unless:
            self.skipped |= steps
        if mine:
            self.present |= steps

    def _forget_early(self, axis_last: Mapping[str, int]) -> None:
        """Early steps below their axis' last step: no `steps_of` point will come there."""
        for axis, kept in self.early.items():
            last = axis_last.get(axis)
            if last is not None:
                for steps in kept:
                    steps.difference_update([x for x in steps if x < last])

    def flush(self) -> Points | None:
        """The run has ended: every round is settled."""
        return self._settle(None)

    def _settle(self, below: int | None) -> Points | None:
        """Rounds before step `below` (every one when None) as points; what is settled
        is forgotten."""
        if self.axis is None:
            return None
        settled = (lambda s: True) if below is None else (lambda s: s < below)
        judged = sorted(s for s in self.rounds if settled(s) and s not in self.skipped)
        values = [1.0 if s in self.present else 0.0 for s in judged]
        for kept in (self.rounds, self.skipped, self.present):
            kept.difference_update([s for s in kept if settled(s)])
        if not judged:
            return None
        return np.asarray(judged, dtype=np.int64), np.asarray(values), self.axis

    # ---- state as data -----------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "rounds": sorted(self.rounds),
            "skipped": sorted(self.skipped),
            "present": sorted(self.present),
            "horizon": self.horizon,
            "early": {axis: [sorted(present), sorted(skipped)]
                      for axis, (present, skipped) in self.early.items()},
        }

    def restore(self, data: Any, where: str) -> None:
        keys = {"axis", "rounds", "skipped", "present", "horizon", "early"}
        if not isinstance(data, dict) or set(data) != keys:
            raise StateDataError(f"{where}: expected a mapping of {', '.join(sorted(keys))}")
        self.axis = decode(data["axis"], str | None, f"{where}.axis")
        for name in ("rounds", "skipped", "present"):
            setattr(self, name, set(decode(data[name], list[int], f"{where}.{name}")))
        self.horizon = decode(data["horizon"], int | None, f"{where}.horizon")
        early = decode(data["early"], dict[str, list[list[int]]], f"{where}.early")
        if any(len(kept) != 2 for kept in early.values()):
            raise StateDataError(f"{where}.early: expected [present, skipped] per step axis")
        self.early = {axis: (set(kept[0]), set(kept[1])) for axis, kept in early.items()}
