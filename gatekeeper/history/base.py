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

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

import numpy as np

# The read model lives with the check that reads it; named here too for the stores' users.
from gatekeeper.checks.baseline import Baselines as Baselines
from gatekeeper.checks.baseline import CoordinateStats as CoordinateStats
from gatekeeper.checks.baseline import Points as Points
from gatekeeper.checks.baseline import RuleBaseline as RuleBaseline
from gatekeeper.checks.baseline import python_sum as python_sum
from gatekeeper.checks.baseline import stats_of as stats_of
from gatekeeper.dburl import redact as redact
from gatekeeper.errors import StateError

DEFAULT_LIMIT = 20

CoordKey = tuple[str, str, str]  # (metric, steps_key, check_key)


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
        if steps.size > 1 and bool(np.any(steps[1:] <= steps[:-1])):  # no difference: none wraps
            raise StateError(
                f"run {run.run_id}: {metric}: steps must be strictly increasing (one value per "
                "coordinate)"
            )


def _distinct(steps: np.ndarray) -> np.ndarray:
    """Sorted distinct steps; a run's steps usually are already (numpy 2's np.unique of
    integers hashes, then sorts: 50 ms for 100,000 steps, on every history rule)."""
    return steps if bool(np.all(steps[1:] > steps[:-1])) else np.unique(steps)


class Enough:
    """When a newest-first baseline read may stop: once every step of `needed` has
    `limit` values (never, when `needed` is None: every row is read). A run lacking a
    needed step does not count for it, so that step may reach further back. Part of the
    contract, so that every backend reads the same rows."""

    def __init__(self, limit: int, needed: np.ndarray | None):
        self.limit = limit
        self._want = None if needed is None else _distinct(np.asarray(needed, dtype=np.int64))
        self._have = None if self._want is None else np.zeros(self._want.size, dtype=np.int64)

    def add(self, steps: np.ndarray) -> None:
        """Count one row (a run's steps at the coordinate prefix)."""
        if self._want is not None and self._have is not None:
            self._have += np.isin(self._want, steps)

    def met(self) -> bool:
        return self._have is not None and bool(np.all(self._have >= self.limit))


class HistoryStore(ABC):
    """A baseline store. Use as a context manager; every method is one transaction."""

    display: str = ""

    @abstractmethod
    def record(self, run: RunRecord) -> None:
        """Write a run and its values; a run id already stored is replaced whole.
        Raises StateError (and writes nothing) if any value is non-finite."""

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
        return self._rows(series, (metric, steps_key, check_key), Enough(limit, needed))

    @abstractmethod
    def _rows(self, series: str, key: CoordKey, enough: Enough) -> list[Points]:
        """Newest-first rows of trusted runs of `series` at `key`, read in batches of
        `enough.limit` runs until a batch comes back short or `enough.met()`."""

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
