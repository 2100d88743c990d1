"""`WandbApiSource`: `wandb://ENTITY/PROJECT/RUN_ID`, read through the public `wandb.Api`.

Credentials and server come from the SDK's own settings: `WANDB_API_KEY`, `WANDB_BASE_URL`
(self-hosted servers). History is read in step ranges of `page_size` rows with the exact
`history(minStep, maxStep)` query; a poll asks only for steps after the last one read, so
a live run costs O(new rows) per poll and a full read O(rows), one page in memory at a time.

Transient failures (429 with Retry-After, 5xx, timeouts, a hung page) are retried with
exponential backoff within a total time budget, then raised as `SourceUnavailable`.
Environment knobs: GATEKEEPER_WANDB_TIMEOUT (seconds per request, default 20),
GATEKEEPER_WANDB_RETRY_SECONDS (total budget per call, default 120).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gatekeeper.errors import SourceError, SourceNotFound, SourceUnavailable, UsageError
from gatekeeper.extras import load, require
from gatekeeper.model import Run, RunState, Series, merge_chunks
from gatekeeper.sources.base import (
    LiveSource,
    Poll,
    StepTops,
    check_cursor_version,
    env_number,
)
from gatekeeper.sources.wandb.axes import NESTED, Columns, StepAxes
from gatekeeper.sources.wandb.scheme import SCHEME

_T = TypeVar("_T")
_CURSOR_VERSION = 1

# The exact, paged history query (the public scan_history needs the server's parquet
# exports; this one reads rows by step range and never samples when maxStep - minStep
# <= samples).
HISTORY_PAGE = """
query HistoryPage($entity: String!, $project: String!, $name: String!, $minStep: Int64!,
                  $maxStep: Int64!, $pageSize: Int!) {
    project(name: $project, entityName: $entity) {
        run(name: $name) { history(minStep: $minStep, maxStep: $maxStep, samples: $pageSize) }
    }
}
"""

_STATES = {s.value: s for s in RunState}
_TRANSIENT_MARKS = ("did not respond in time", "timed out", "timeout", "temporarily")


def parse_spec(spec: str) -> tuple[str, str, str]:
    parts = spec[len(SCHEME) :].strip("/").split("/")
    if len(parts) == 4 and parts[2] == "runs":  # a pasted URL path: ENTITY/PROJECT/runs/ID
        parts = [parts[0], parts[1], parts[3]]
    if len(parts) != 3 or not all(parts):
        raise UsageError(
            f"source {spec!r}: expected wandb://ENTITY/PROJECT/RUN_ID, "
            "e.g. wandb://my-team/grpo/abc123xy"
        )
    return parts[0], parts[1], parts[2]


class Retry:
    """Bounded retries: exponential backoff with jitter, honouring a server's Retry-After."""

    def __init__(self, budget: float, first_delay: float = 0.5, max_delay: float = 10.0):
        self.budget = budget
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.attempts = 0  # failed attempts over the source's lifetime (poll errors)

    def call(self, what: str, fn: Callable[[], _T]) -> _T:
        deadline = time.monotonic() + self.budget
        delay = self.first_delay
        while True:
            try:
                return fn()
            except Exception as exc:  # the SDK raises many types; classify by content
                permanent = _permanent(exc)
                if permanent is not None:
                    raise permanent from None
                if isinstance(exc, TypeError | AttributeError | KeyError | IndexError):
                    # a response of a shape nobody expected: retrying will not change it
                    raise SourceError(f"{what}: unexpected answer: {_describe(exc)}") from exc
                self.attempts += 1
                left = deadline - time.monotonic()
                wait = min(_retry_after(exc) or delay, self.max_delay)
                if left <= wait:
                    raise SourceUnavailable(
                        f"{what}: still failing after {self.budget:g}s of retries: "
                        f"{_describe(exc)}; check the server (WANDB_BASE_URL) and retry later"
                    ) from None
                time.sleep(wait * random.uniform(0.8, 1.0))
                delay = min(delay * 2, self.max_delay)


class WandbApiSource(LiveSource):
    """A run on a wandb server (wandb.ai or self-hosted), read through `wandb.Api`."""

    kind = "wandb://ENTITY/PROJECT/RUN_ID"

    def __init__(
        self,
        spec: str,
        *,
        page_size: int = 1000,
        timeout: float | None = None,
        retry_seconds: float | None = None,
    ):
        require("wandb", "reading a wandb:// run", ("wandb",))
        super().__init__(spec)
        self.entity, self.project, self.run_id = parse_spec(spec)
        self.page_size = page_size
        self.timeout = timeout or env_number("GATEKEEPER_WANDB_TIMEOUT", 20, 0.1, 3600)
        budget = retry_seconds or env_number("GATEKEEPER_WANDB_RETRY_SECONDS", 120, 0, 86400)
        self.retry = Retry(budget)
        self._api: Any = None
        self._sdk_run: Any = None
        self._forms: dict[str, bool] = {}  # metric name -> logged as a nested key
        self._rewind()

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.startswith(SCHEME)

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}/{self.run_id}"

    # -- Source / LiveSource ------------------------------------------------------------

    def _rewind(self) -> None:
        """Nothing read yet: the next poll pages the history from `_step` 0."""
        self._next_step = 0
        self._carry: dict[str, float] = {}
        self._tops = StepTops()  # a `define_metric` step going back: read again whole

    def rewind(self) -> bool:
        self._rewind()
        return True

    def read(self) -> Run:
        self._rewind()
        poll = self.poll()
        poll.run.series = poll.series
        return poll.run

    def poll(self) -> Poll:
        sdk_run = self.load_run()
        run = self._run_meta(sdk_run)
        last = int((sdk_run._attrs.get("historyKeys") or {}).get("lastStep", -1))
        axes = StepAxes.from_config(sdk_run.rawconfig)
        series, reset = self._new_series(sdk_run, last, axes), False
        if self._tops.below(series):  # `check` sorts such points among the earlier ones
            self._rewind()
            series, reset = self._new_series(sdk_run, last, axes), True
        self._tops.note(series)
        points = sum(len(s) for s in series.values())
        return Poll(series=series, run=run, ended=not run.state.is_live, points=points,
                    reset=reset)

    def _new_series(self, sdk_run: Any, last: int, axes: StepAxes) -> dict[str, Series]:
        """The history rows from the cursor's `_step` to `last`, page by page, per metric."""
        chunks: dict[str, list[Series]] = {}
        while self._next_step <= last:
            lo = self._next_step
            hi = min(lo + self.page_size, last + 1)
            rows = self._history_page(sdk_run, lo, hi)
            for metric, part in _rows_to_series(rows, axes, self._carry, self._forms).items():
                chunks.setdefault(metric, []).append(part)
            self._next_step = hi
        return {
            m: merge_chunks(m, [(p.steps, p.values) for p in parts], parts[0].step_key)
            for m, parts in sorted(chunks.items())
        }

    def cursor(self) -> dict[str, Any]:
        return {"version": _CURSOR_VERSION, "next_step": self._next_step, "carry": self._carry,
                "tops": self._tops.to_json()}

    def restore(self, cursor: dict[str, Any]) -> None:
        check_cursor_version(cursor, _CURSOR_VERSION, self.spec)
        self._next_step = int(cursor["next_step"])
        self._carry = {k: float(v) for k, v in cursor.get("carry", {}).items()}
        self._tops = StepTops(cursor.get("tops"))

    def read_summary(self, wanted: set[str]) -> dict[str, float]:
        """Numeric summary values of `wanted` metrics (HF writes `train_loss` there only)."""
        summary = dict(self.load_run().summary or {})
        out: dict[str, float] = {}
        for key in wanted:
            value = summary.get(key)
            if isinstance(value, bool | int | float):
                out[key] = float(value)
        return out

    # -- SDK calls, each retried within the budget --------------------------------------

    def api(self) -> Any:
        if self._api is None:
            # imported outside the retries: a missing SDK is no transient failure
            wandb = load("wandb", "wandb", "reading a wandb:// run")
            timeout = max(1, round(self.timeout))
            self._api = self.retry.call(
                f"connect to wandb for {self.spec}", lambda: wandb.Api(timeout=timeout)
            )
        return self._api

    def load_run(self) -> Any:
        """The run as the server has it now: reloaded on every call (the SDK caches runs)."""
        api = self.api()
        if self._sdk_run is None:
            self._sdk_run = self.retry.call(f"load {self.spec}", lambda: api.run(self.path))
            return self._sdk_run
        run = self._sdk_run
        self.retry.call(f"reload {self.spec}", lambda: run.load(force=True))
        return run

    def _history_page(self, sdk_run: Any, lo: int, hi: int) -> list[dict[str, Any]]:
        def fetch() -> list[dict[str, Any]]:
            data = sdk_run._exec(HISTORY_PAGE, minStep=lo, maxStep=hi, pageSize=hi - lo)
            lines = ((data or {}).get("project") or {}).get("run") or {}
            return [json.loads(line) for line in lines.get("history") or []]

        return self.retry.call(f"read history steps {lo}..{hi - 1} of {self.spec}", fetch)

    def _run_meta(self, sdk_run: Any) -> Run:
        return Run(
            name=sdk_run.display_name or sdk_run.name or self.run_id,
            source=self.spec,
            tags=tuple(sdk_run.tags or ()),
            config=dict(sdk_run.config or {}),
            state=_STATES.get(str(sdk_run.state), RunState.UNKNOWN),
            url=sdk_run.url,
            run_id=self.run_id,
            carries_state=True,
            state_detail=f"server state {sdk_run.state}",
        )


def _rows_to_series(
    rows: list[dict[str, Any]], axes: StepAxes, carry: dict[str, float], forms: dict[str, bool]
) -> dict[str, Series]:
    cols = Columns(carry, forms=forms)
    entries: dict[str, tuple[list[int], list[Any]]] = {}
    for index, row in enumerate(rows):
        cols.steps.append(float(row.get("_step", index)))
        for key, value in _flatten(row):
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = ([], [])
            entry[0].append(index)
            entry[1].append(value)
    for key, (idx, vals) in entries.items():
        cols.rows[key] = idx
        cols.vals[key] = vals
    return cols.finish(axes)


def _flatten(row: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts logged as metrics become dotted keys, as wandb shows them; media
    objects (dicts with `_type`) are not metrics and are left out."""
    out: list[tuple[str, Any]] = []
    for key, value in row.items():
        if isinstance(value, dict):
            if "_type" not in value:
                out.extend(_flatten(value, f"{prefix}{key}{NESTED}"))
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _permanent(exc: BaseException) -> SourceError | None:
    """The source error for failures no retry can fix, None for transient ones."""
    if isinstance(exc, SourceError):
        return exc
    text = str(exc)
    lowered = text.lower()
    if "could not find run" in lowered or "not found" in lowered:
        return SourceNotFound(f"wandb run not found: {text}; check ENTITY/PROJECT/RUN_ID")
    name = type(exc).__name__
    if any(mark in lowered for mark in _TRANSIENT_MARKS):
        return None  # e.g. credentials not verified because the server did not answer
    if name in ("AuthenticationError", "UsageError") or "401" in text or "403" in text:
        return SourceError(
            f"wandb refused the credentials ({name}: {text}); set WANDB_API_KEY for "
            "the server in WANDB_BASE_URL"
        )
    return None


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"
