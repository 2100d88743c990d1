"""The baseline-store contract every backend implements, and the values it deals in.

A store keeps runs and their values. A run belongs to one *series* (which runs share a
baseline: canonical JSON of configurable run metadata, e.g. miles' test path, backend,
suite) and is `trusted` or not. A value sits at a *coordinate*: the metric, the rule's
step selection and band as written (miles' `steps_key` / `constraint_key`), and the step
(a whole-series selection such as `steps: last` keys on its position from the end, -1).

A run's values of one (metric, steps_key, check_key) are kept together as two packed
arrays (steps, values): one row per run and coordinate prefix, so a baseline read is one
indexed query returning a handful of rows instead of millions of tuples.

Backends must agree exactly: the same runs in, the same newest-first trusted rows out,
trust revoked for the same runs. `tests/history/test_store_contract.py` holds them to it.
"""

from __future__ import annotations

import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np

from gatekeeper.errors import StateError

DEFAULT_LIMIT = 20

CoordKey = tuple[str, str, str]  # (metric, steps_key, check_key)
Points = tuple[np.ndarray, np.ndarray]  # (int64 steps, float64 values), sorted by step


@dataclass(frozen=True, order=True)
class Coordinate:
    """Where a value sits within a run."""

    metric: str
    steps_key: str
    check_key: str
    step: int


@dataclass(frozen=True)
class RunRecord:
    """One run as it is written: identity, provenance, trust and its finite values, as
    packed arrays per coordinate prefix."""

    run_id: str
    series: str
    trusted: bool
    points: Mapping[CoordKey, Points]
    commit: str | None = None
    created_at: str | None = None  # set by the store unless imported

    @classmethod
    def of(
        cls,
        run_id: str,
        series: str,
        trusted: bool,
        values: Mapping[Coordinate, float],
        commit: str | None = None,
    ) -> RunRecord:
        """A record from single values by coordinate (tests, small callers)."""
        grouped: dict[CoordKey, dict[int, float]] = {}
        for c, v in values.items():
            grouped.setdefault((c.metric, c.steps_key, c.check_key), {})[c.step] = float(v)
        return cls(run_id, series, trusted, {k: points_of(d) for k, d in grouped.items()}, commit)

    @property
    def n_values(self) -> int:
        return sum(int(s.size) for s, _ in self.points.values())


def points_of(by_step: Mapping[int, float]) -> Points:
    steps = np.array(sorted(by_step), dtype=np.int64)
    return steps, np.array([by_step[int(s)] for s in steps], dtype=np.float64)


@dataclass(frozen=True)
class StoredRun:
    """One run as `runs()` lists it."""

    run_id: str
    series: str
    trusted: bool
    commit: str | None
    created_at: str
    values: int


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


def stats_of(rows: Sequence[Points], last_n: int) -> CoordinateStats:
    """Per step: mean/std/count of its newest `last_n` values over `rows` (newest first).
    A run that lacks a step does not count for it, so a step can reach back past
    `last_n` runs, as miles' per-coordinate `LIMIT` does."""
    if not rows:
        empty = np.empty(0)
        return CoordinateStats(np.empty(0, np.int64), empty, empty, np.empty(0, np.int64))
    steps = np.unique(np.concatenate([s for s, _ in rows]))
    matrix = np.zeros((len(rows), steps.size))
    present = np.zeros((len(rows), steps.size), dtype=bool)
    for i, (s, v) in enumerate(rows):
        idx = np.searchsorted(steps, s)
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


def redact(url: str) -> str:
    """A store URL with any password replaced, fit for logs and reports."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def check_record(run: RunRecord) -> None:
    """The write boundary: NaN/Inf are evidence for a verdict, never a baseline; each
    coordinate holds one value per step."""
    for (metric, _, _), (steps, values) in run.points.items():
        if steps.shape != values.shape or steps.ndim != 1:
            raise StateError(f"run {run.run_id}: {metric}: steps and values differ in shape")
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raise StateError(
                f"run {run.run_id}: refusing to store non-finite value {values[i]} at {metric} "
                f"step {int(steps[i])}; non-finite values never enter a baseline"
            )
        if steps.size > 1 and bool(np.any(np.diff(steps) <= 0)):
            raise StateError(
                f"run {run.run_id}: {metric}: steps must be strictly increasing (one value per "
                "coordinate)"
            )


class HistoryStore(ABC):
    """A baseline store. Use as a context manager; every method is one transaction."""

    display: str = ""

    @abstractmethod
    def record(self, run: RunRecord) -> None:
        """Write a run and its values; a run id already stored is replaced whole.
        Raises StateError (and writes nothing) if any value is non-finite."""

    @abstractmethod
    def baseline_rows(
        self,
        series: str,
        metric: str,
        steps_key: str,
        check_key: str,
        limit: int = DEFAULT_LIMIT,
        needed: np.ndarray | None = None,
    ) -> list[Points]:
        """Newest-first rows of trusted runs of `series` at one coordinate prefix: as many
        as it takes for every step of `needed` to have `limit` values (all rows when
        `needed` is None)."""

    def baseline(
        self, series: str, metric: str, steps_key: str, check_key: str, limit: int = DEFAULT_LIMIT
    ) -> dict[int, list[float]]:
        """Per step, the newest `limit` values of trusted runs of `series`, newest first."""
        out: dict[int, list[float]] = {}
        for steps, values in self.baseline_rows(series, metric, steps_key, check_key, limit):
            for s, v in zip(steps.tolist(), values.tolist(), strict=True):
                got = out.setdefault(int(s), [])
                if len(got) < limit:
                    got.append(float(v))
        return dict(sorted(out.items()))

    @abstractmethod
    def mark_untrusted(self, *, run_id: str | None = None, commit: str | None = None) -> int:
        """Revoke trust (rows stay) for runs matching the id or commit; how many changed."""

    @abstractmethod
    def runs(self, series: str | None = None, limit: int = 50) -> list[StoredRun]:
        """Recorded runs, newest first, optionally of one series."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
