"""The run model: metadata plus one numpy series per metric, each on its own step axis."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STEP_DTYPE = np.int64
STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1  # the steps' range (int64), wherever one is read
VALUE_DTYPE = np.float64


class RunState(str, enum.Enum):
    """Lifecycle of a run as its source reports it."""

    RUNNING = "running"
    FINISHED = "finished"
    CRASHED = "crashed"
    FAILED = "failed"
    KILLED = "killed"
    UNKNOWN = "unknown"

    @property
    def is_live(self) -> bool:
        return self in (RunState.RUNNING, RunState.UNKNOWN)


# The step TensorBoard and MLflow give every point, and a JSONL row's plain "step": an
# argument of each add_scalar/log_metric call, not a named axis the metrics share, so a
# per-epoch metric may count epochs on it next to a per-batch one counting batches.
OWN_STEP = "step"


@dataclass(frozen=True)
class Series:
    """One metric: parallel int64 steps and float64 values (NaN/±Inf kept), sorted by step.

    `step_key` names the axis the steps are on (`train/step`, `_step`, ...). The plain
    `step` (OWN_STEP) is a step no shared axis names: each metric's own counter.
    """

    metric: str
    steps: np.ndarray
    values: np.ndarray
    step_key: str = OWN_STEP

    def __post_init__(self) -> None:
        if self.steps.shape != self.values.shape or self.steps.ndim != 1:
            raise ValueError(
                f"series {self.metric}: steps {self.steps.shape} and values "
                f"{self.values.shape} must be 1-d and of equal length"
            )

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @classmethod
    def from_lists(
        cls, metric: str, steps: Iterable[int], values: Iterable[float], step_key: str = "step"
    ) -> Series:
        return cls(
            metric,
            np.asarray(list(steps), dtype=STEP_DTYPE),
            np.asarray(list(values), dtype=VALUE_DTYPE),
            step_key,
        )

    @classmethod
    def empty(cls, metric: str, step_key: str = "step") -> Series:
        return cls(metric, np.empty(0, STEP_DTYPE), np.empty(0, VALUE_DTYPE), step_key)


def merge_chunks(
    metric: str,
    chunks: list[tuple[np.ndarray, np.ndarray]],
    step_key: str,
    ordered: dict[int, bool] | None = None,
) -> Series:
    """Concatenate (steps, values) chunks and sort by step, stably (equal steps keep order).
    `ordered` memoizes, by the id of a steps array the caller keeps alive meanwhile,
    whether it is sorted: the metrics of one row share their steps array (a live poll
    merges each of them), so it is checked once."""
    if not chunks:
        return Series.empty(metric, step_key)
    if len(chunks) == 1:
        steps, values = chunks[0]
    else:
        steps = np.concatenate([c[0] for c in chunks])
        values = np.concatenate([c[1] for c in chunks])
    steps = np.asarray(steps, dtype=STEP_DTYPE)
    values = np.asarray(values, dtype=VALUE_DTYPE)
    if ordered is not None and len(chunks) == 1:
        unsorted = ordered.get(id(steps))
        if unsorted is None:
            unsorted = ordered[id(steps)] = _unsorted(steps)
    else:
        unsorted = _unsorted(steps)
    if unsorted:
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return Series(metric, steps, values, step_key)


def _unsorted(steps: np.ndarray) -> bool:
    return steps.size > 1 and bool(np.any(steps[1:] < steps[:-1]))


@dataclass(frozen=True)
class Capture:
    """What a source that keeps only some metrics can carry at all (miles' CI record keeps
    7 keys of every log dict): a rule on a metric outside `keys` cannot be judged there,
    which is not the run "not logging" it. `name` and `instead` word the reports: `metric
    X not captured by {name}`, `judge it on {instead}`."""

    name: str
    keys: frozenset[str]
    instead: str


@dataclass
class Run:
    """A training run: metadata plus its series by metric name."""

    name: str
    source: str
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    state: RunState = RunState.UNKNOWN
    url: str | None = None
    run_id: str | None = None
    series: dict[str, Series] = field(default_factory=dict)
    # metric -> why its series cannot be judged (a null or duplicate step in a miles
    # record). A rule reading such a metric is ERROR with this reason; the rest is judged.
    metric_errors: dict[str, str] = field(default_factory=dict)
    # Run-state judging (gatekeeper/run_state.py): `carries_state` is True for sources that
    # record how a run ends (wandb), so a run without its end is visibly incomplete;
    # `state_detail` says why (exit code, missing exit record); `allowed_states` maps a
    # state relaxed by a policy or flag to its reason.
    carries_state: bool = False
    state_detail: str = ""
    allowed_states: dict[str, str] = field(default_factory=dict)
    # why a final verdict that judges no gating rule may pass (--allow-nothing-judged)
    allow_nothing_judged: str | None = None
    # Step-less values (wandb's summary): metric -> value, judged by rules on metrics
    # that have no history points.
    summary_values: dict[str, float] = field(default_factory=dict)
    # the metrics the source can carry, when it keeps only some (None: any it was given)
    capture: Capture | None = None

    def lookup(self, dotted: str) -> tuple[bool, Any]:
        """Resolve `name`, `tags`, `state`, `id` or a dotted `config.a.b` key: (found, value)."""
        if dotted == "name":
            return True, self.name
        if dotted == "tags":
            return True, list(self.tags)
        if dotted == "state":
            return True, self.state.value
        if dotted == "id":
            return self.run_id is not None, self.run_id
        if not dotted.startswith("config."):
            return False, None
        return lookup_dotted(self.config, dotted[len("config.") :])

    def summary(self) -> dict[str, Any]:
        """Metadata for reports (no series data)."""
        return {
            "name": self.name,
            "id": self.run_id,
            "source": self.source,
            "state": self.state.value,
            "state_detail": self.state_detail or None,
            "tags": list(self.tags),
            "url": self.url,
            "metrics": len(self.series),
            "points": int(sum(len(s) for s in self.series.values())),
        }


def lookup_dotted(mapping: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """Find `a.b.c` in nested mappings; a literal key containing dots wins over nesting."""
    if dotted in mapping:
        return True, mapping[dotted]
    head, sep, rest = dotted.partition(".")
    while sep:
        if head in mapping and isinstance(mapping[head], Mapping):
            found, value = lookup_dotted(mapping[head], rest)
            if found:
                return found, value
        nxt, sep, rest = rest.partition(".")
        head = f"{head}.{nxt}"
    return False, None


def set_dotted(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating levels as needed."""
    parts = dotted.split(".")
    cur = mapping
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = value
