"""What the MLflow source needs from a tracking backend, in one shape for both backends.

`RestClient` (rest.py) speaks the REST API of a tracking server; `StoreClient` (store.py)
opens a local store (`mlruns/` file store, `sqlite:///mlflow.db`) through mlflow's own store
classes. Both return these plain records, so the source never sees which one it has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gatekeeper.model import RunState

# MLflow run statuses -> run states. SCHEDULED has not started: live like RUNNING.
STATES = {
    "RUNNING": RunState.RUNNING,
    "SCHEDULED": RunState.RUNNING,
    "FINISHED": RunState.FINISHED,
    "FAILED": RunState.FAILED,
    "KILLED": RunState.KILLED,
}
PAGE_SIZE = 5000  # points per history page


@dataclass(frozen=True)
class Point:
    step: int
    timestamp: int
    value: float


@dataclass
class RunInfo:
    run_id: str
    name: str
    status: str
    experiment_id: str
    artifact_uri: str = ""
    start_time: int = 0  # ms since the epoch
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    latest: dict[str, Point] = field(default_factory=dict)  # metric -> its latest point

    @property
    def state(self) -> RunState:
        return STATES.get(self.status.upper(), RunState.UNKNOWN)


@dataclass
class Page:
    points: list[Point]
    next_token: str | None


class TrackingClient(Protocol):
    requests: int  # calls made to the backend (what a poll costs)

    def get_run(self, run_id: str) -> RunInfo: ...

    def history_page(self, run_id: str, key: str, token: str | None) -> Page: ...

    def search_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunInfo]: ...

    def experiment_ids(self, names: list[str]) -> list[str]: ...

    def all_experiment_ids(self) -> list[str]: ...

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None: ...

    def put_artifact(self, run: RunInfo, name: str, body: bytes) -> bool: ...

    def run_url(self, run: RunInfo) -> str | None: ...


def resolve_experiment_ids(names: list[str], lookup: Callable[[str], str]) -> list[str]:
    """Experiment ids of `names` in order: a number is an id already (never looked up), a
    name is asked of the backend through `lookup`."""
    return [name if name.isdigit() else lookup(name) for name in names]


# SQL cannot hold an infinity: mlflow's SQL stores (sqlite, any SQL backend of a server)
# write +/-Inf as +/-DBL_MAX — mlflow 3.17.2 `SqlAlchemyStore.sanitize_metric_value` (and
# `store/fs2db` when a file store is migrated) — and read it back as that number. A server
# does not say which store it has, so every backend maps it back alike (a file store writes
# `inf`, never this number, unless a trainer logged DBL_MAX itself).
_SQL_INF = 1.7976931348623157e308


def number(raw: Any) -> float:
    """A metric value as MLflow sends it: a number, or "NaN"/"Infinity"/"-Infinity" in JSON;
    +/-DBL_MAX is the infinity a SQL store kept (above)."""
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        try:
            value = float(str(raw))
        except ValueError:
            return math.nan
    return math.copysign(math.inf, value) if abs(value) == _SQL_INF else value


def param_value(raw: str) -> Any:
    """MLflow keeps params as strings; `8`, `0.1`, `true` become numbers and booleans, so a
    policy condition like `config.lora_rank: 8` matches the way it does for other sources."""
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            continue
    return raw
