"""What the `history` check reads of a baseline store: per rule, the trusted rows of its
coordinates, newest run first, and their per-coordinate reference and spread.

The read model sits with the check, not with the stores (`gatekeeper/history/`): a check
is handed `Baselines` through `EvalContext.history` and never imports a store, so there
is no import loop between checks/ and history/. `gatekeeper/baselines.py` reads them
from a store before judging.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

Points = tuple[np.ndarray, np.ndarray]  # (int64 steps, float64 values), sorted by step


@dataclass(frozen=True)
class CoordinateStats:
    """Per coordinate (sorted steps): the mean, std and count of its newest trusted values."""

    steps: np.ndarray
    ref: np.ndarray
    std: np.ndarray
    count: np.ndarray


def python_sum(
    matrix: np.ndarray, taken: np.ndarray, *, compensated: bool | None = None
) -> np.ndarray:
    """Column sums of `matrix` over the `taken` cells, row 0 first, bit-for-bit what
    CPython's `sum()` returns for each column's list: miles' gate computes its reference
    as `sum(values) / len(values)` on newest-first values. CPython >= 3.12 sums floats
    with Neumaier compensation, older ones left to right; we run on the same interpreter
    miles' gate would (its CI container), so we follow the running one unless told."""
    if compensated is None:
        compensated = sys.version_info >= (3, 12)
    n = matrix.shape[1]
    total = np.zeros(n)
    if not compensated:
        for row, take in zip(matrix, taken, strict=True):
            total = np.where(take, total + row, total)
        return total
    comp = np.zeros(n)
    for row, take in zip(matrix, taken, strict=True):
        x = np.where(take, row, 0.0)
        t = total + x
        c = np.where(np.abs(total) >= np.abs(x), (total - t) + x, (x - t) + total)
        comp = np.where(take, comp + c, comp)
        total = np.where(take, t, total)
    # CPython adds the compensation only when it is non-zero and finite.
    return np.where((comp != 0) & np.isfinite(comp), total + comp, total)


def _columns(rows: Sequence[Points]) -> tuple[np.ndarray, list[np.ndarray | slice]]:
    """The sorted distinct steps of all rows, and where each row's steps sit among them.
    Runs of one series usually log the very same steps: then they are the first row's,
    no search. Otherwise one sort (numpy 2's np.unique of integers builds a hash table,
    then sorts: ~4x slower on the 10^5-10^6 steps a few runs hold) and a search."""
    first = rows[0][0]
    if bool(np.all(first[1:] > first[:-1])) and all(
        np.array_equal(s, first) for s, _ in rows[1:]
    ):
        return first, [slice(None)] * len(rows)
    steps = np.sort(np.concatenate([s for s, _ in rows]))
    if steps.size:
        steps = steps[np.concatenate(([True], steps[1:] != steps[:-1]))]
    return steps, [np.searchsorted(steps, s) for s, _ in rows]


def stats_of(rows: Sequence[Points], last_n: int) -> CoordinateStats:
    """Per step: mean/std/count of its newest `last_n` values over `rows` (newest first).
    A run that lacks a step does not count for it, so a step can reach back past
    `last_n` runs, as miles' per-coordinate `LIMIT` does."""
    if not rows:
        empty = np.empty(0)
        return CoordinateStats(np.empty(0, np.int64), empty, empty, np.empty(0, np.int64))
    steps, where = _columns(rows)
    matrix = np.zeros((len(rows), steps.size))
    present = np.zeros((len(rows), steps.size), dtype=bool)
    for i, ((_, v), idx) in enumerate(zip(rows, where, strict=True)):
        matrix[i, idx] = v
        present[i, idx] = True
    taken = present & (np.cumsum(present, axis=0) <= last_n)
    count = taken.sum(axis=0)
    keep = count > 0
    steps, matrix, taken, count = steps[keep], matrix[:, keep], taken[:, keep], count[keep]
    ref = python_sum(matrix, taken) / count
    dev = np.where(taken, matrix - ref, 0.0)
    std = np.sqrt((dev * dev).sum(axis=0) / count)
    return CoordinateStats(steps, ref, std, count.astype(np.int64))


class RuleBaseline:
    """Trusted history of one rule's coordinates: rows of (steps, values), newest run
    first. `positional`: the rule selects from the end (`steps: last`), steps -n..-1.
    Built from store rows, or from `values` (step -> values newest first) for tests."""

    def __init__(
        self,
        values: Mapping[int, Sequence[float]] | None = None,
        positional: bool = False,
        *,
        rows: Sequence[Points] | None = None,
    ):
        if rows is None:
            rows = _rows_of(values or {})
        self.rows = list(rows)
        self.positional = positional
        self._stats: dict[int, CoordinateStats] = {}

    def stats(self, last_n: int) -> CoordinateStats:
        """Vectorized reference and spread of every coordinate (cached; the gate computes it
        when it reads the store, so judging stays O(points))."""
        if last_n not in self._stats:
            self._stats[last_n] = stats_of(self.rows, last_n)
        return self._stats[last_n]


def _rows_of(values: Mapping[int, Sequence[float]]) -> list[Points]:
    """Per-step newest-first lists as rows: row i holds each step's i-th newest value."""
    depth = max((len(v) for v in values.values()), default=0)
    rows = []
    for i in range(depth):
        steps = sorted(s for s, v in values.items() if len(v) > i)
        rows.append(
            (
                np.array(steps, dtype=np.int64),
                np.array([values[s][i] for s in steps], dtype=np.float64),
            )
        )
    return rows


@dataclass(frozen=True)
class Baselines:
    """What the engine sees of a store (read before evaluation): rule key -> baseline."""

    rules: Mapping[str, RuleBaseline] = field(default_factory=dict)
    store: str = ""  # the store, as shown to people (password redacted)

    def get(self, rule_key: str | None) -> RuleBaseline | None:
        return self.rules.get(rule_key or "")
