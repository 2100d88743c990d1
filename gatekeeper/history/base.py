"""The baseline-store contract every backend implements, and the values it deals in.

A store keeps runs and their values. A run belongs to one *series* (which runs share a
baseline: canonical JSON of configurable run metadata, e.g. test path, backend, suite)
and is `trusted` or not. A value sits at a *coordinate*: the metric, the rule's step
selection and check as written, and the step (a whole-series selection such as
`steps: last` keys on its position from the end, -1, never on the step it landed on).

Backends must agree exactly: the same runs in, the same newest-first trusted values out,
trust revoked for the same runs. `tests/history/test_store_contract.py` holds them to it.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from types import TracebackType

import numpy as np

from gatekeeper.errors import StateError

DEFAULT_LIMIT = 20


@dataclass(frozen=True, order=True)
class Coordinate:
    """Where a value sits within a run."""

    metric: str
    steps_key: str
    check_key: str
    step: int


@dataclass(frozen=True)
class RunRecord:
    """One run as it is written: identity, provenance, trust and its finite values."""

    run_id: str
    series: str
    trusted: bool
    values: Mapping[Coordinate, float]
    commit: str | None = None


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


@dataclass(frozen=True)
class RuleBaseline:
    """Trusted history of one rule's coordinates: step -> values, newest first.
    `positional`: the rule selects from the end (`steps: last`), so steps are -n..-1."""

    values: Mapping[int, list[float]] = field(default_factory=dict)
    positional: bool = False
    _stats: dict[int, CoordinateStats] = field(default_factory=dict, compare=False, repr=False)

    def stats(self, last_n: int) -> CoordinateStats:
        """Vectorized reference and spread of every coordinate (cached; the gate computes it
        when it reads the store, so judging stays O(points))."""
        if last_n not in self._stats:
            self._stats[last_n] = _stats(self.values, last_n)
        return self._stats[last_n]


def _stats(values: Mapping[int, list[float]], last_n: int) -> CoordinateStats:
    steps = np.array(sorted(values), dtype=np.int64)
    lists = [values[int(s)][:last_n] for s in steps]
    count = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
    keep = count > 0
    steps, count = steps[keep], count[keep]
    flat = np.fromiter(chain.from_iterable(lists), dtype=np.float64, count=int(count.sum()))
    if not steps.size:
        empty = np.empty(0)
        return CoordinateStats(steps, empty, empty, count)
    starts = np.concatenate([[0], np.cumsum(count)[:-1]])
    ref = np.add.reduceat(flat, starts) / count
    dev = flat - np.repeat(ref, count)
    std = np.sqrt(np.add.reduceat(dev * dev, starts) / count)
    return CoordinateStats(steps, ref, std, count)


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


def check_finite(run: RunRecord) -> None:
    """The write boundary: NaN/Inf are evidence for a verdict, never a baseline."""
    for coord, value in run.values.items():
        if not math.isfinite(value):
            raise StateError(
                f"run {run.run_id}: refusing to store non-finite value {value} at {coord.metric} "
                f"step {coord.step}; non-finite values never enter a baseline"
            )


class HistoryStore(ABC):
    """A baseline store. Use as a context manager; every method is one transaction."""

    display: str = ""

    @abstractmethod
    def record(self, run: RunRecord) -> None:
        """Write a run and its values; a run id already stored is replaced whole.
        Raises StateError (and writes nothing) if any value is non-finite."""

    @abstractmethod
    def baseline(
        self, series: str, metric: str, steps_key: str, check_key: str, limit: int = DEFAULT_LIMIT
    ) -> dict[int, list[float]]:
        """Per step, the newest `limit` values of trusted runs of `series`, newest first."""

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
