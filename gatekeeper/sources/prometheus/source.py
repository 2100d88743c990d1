"""`PrometheusSource`: series from a Prometheus server as one run's metrics.

    prom+http://HOST:9090?selector={run="grpo-7b"}[&start=-6h][&end=...][&axis=index|time]
        [&late=15s]
    prom+http://HOST:9090?query=rate(nccl_errors_total{run="grpo-7b"}[1m])&name=nccl_errors
        [&resolution=15s][&start=...][&end=...][&run=grpo-7b][&late=15s]

`selector` reads every raw sample of every series it matches (an instant query of a range
vector: no lookback fill, no resampling), one metric per series; `query` evaluates any
PromQL on a grid of `resolution` (a range query). A series' metric name is its `__name__`
(or `name=`), followed by `{labels}` that the selector does not fix, `job` and `instance`
aside. Steps are the sample's index since `start` (`axis=index`, the default; on the grid
for a query) or its Unix time in whole seconds (`axis=time`). A relative `start` (`-6h`,
default `-24h`) is fixed when the source is opened and kept in the cursor. Prometheus runs
carry no state; a run with an `end` ends when a poll has read past it, `late` s after it.

A scraped sample is stamped with the time its scrape began but stored when the answer is
in, up to `late` s later (default LATE: Prometheus' default scrape_timeout, 10 s, plus
the time to store it), so a poll may not yet see a sample older than the time it asks up
to. A `selector` poll therefore asks again for the last `late` seconds and keeps, per
series, only samples newer than the newest it delivered (a target's scrapes are stored in
order), so a live run gets every sample, on the index `check` gives it. A `query` poll
reads grid points `late` s old at the newest (at least one resolution), as a sample still
to be stored may change the value at a later grid time. A sample stored more than `late`
s after its time is seen by `check`, not by a poll that has passed it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote

import numpy as np

from gatekeeper.errors import SourceError, UsageError, shown_url
from gatekeeper.model import Run, merge_chunks
from gatekeeper.sources.base import (
    LiveSource,
    Poll,
    check_cursor_version,
    checked_url,
    decoded,
)
from gatekeeper.sources.prometheus.api import PrometheusApi
from gatekeeper.sources.prometheus.scheme import SCHEMES
from gatekeeper.yamlfile import seconds as duration

_CURSOR_VERSION = 1
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_RAW_WINDOW = 6 * 3600.0  # seconds of raw samples asked per request
# s a scraped sample may reach the TSDB after its time: Prometheus' default scrape_timeout
# (10 s) bounds a scrape, plus the time to store it
LATE = 15.0
_GRID_POINTS = 10000  # Prometheus refuses range queries over 11,000 points per series
_YEAR_10000 = 253402300800.0  # Unix seconds of 10000-01-01
_KEYS = {"selector", "query", "name", "start", "end", "resolution", "axis", "run", "late"}


def seconds(text: str) -> float:
    """A duration of the URL (`15s`, `6h`, `250ms`): the config files' grammar."""
    try:
        return float(duration(text))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def timestamp(text: str, now: float) -> float:
    """Unix seconds, RFC 3339, or relative to now (`-6h`): a time of the years 1970 to
    9999 (a run's config shows it as a date)."""
    text = text.strip()
    if text.startswith("-"):
        value = now - seconds(text[1:])
    else:
        try:
            value = float(text)
        except ValueError:
            value = _iso(text)
    if not 0 <= value < _YEAR_10000:  # NaN too
        raise UsageError(f"expected a time of the years 1970 to 9999, got {text!r}")
    return value


def _iso(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UsageError(
            f"expected a time as Unix seconds, RFC 3339 or -6h, got {text!r}"
        ) from None


@dataclass(frozen=True)
class PromSpec:
    base: str
    selector: str | None
    query: str | None
    name: str | None
    start: float
    end: float | None
    resolution: float
    axis: str
    run: str
    late: float = LATE  # s a sample may be stored after its time

    def fixed_labels(self) -> set[str]:
        return {k for k, _ in _MATCHER.findall(self.selector or self.query or "")}


def parse_spec(spec: str, now: float) -> PromSpec:
    url = checked_url(spec.removeprefix("prom+"), "Prometheus")
    params: dict[str, str] = {}
    for part in url.query.split("&") if url.query else []:
        key, _, value = part.partition("=")  # PromQL may hold `=`; `+` stays a plus
        params[unquote(key)] = unquote(value)
    unknown = set(params) - _KEYS
    if unknown or ("selector" in params) == ("query" in params):
        raise UsageError(
            f"source {shown_url(spec)!r}: expected prom+http://HOST:PORT?selector="
            f"{{run=\"NAME\"}} or "
            f"?query=PROMQL&name=METRIC (and start, end, resolution, axis, run, late)"
            + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
        )
    axis = params.get("axis", "index")
    if axis not in ("index", "time"):
        raise UsageError(f"source {shown_url(spec)!r}: axis is index or time, got {axis!r}")
    resolution = _duration(spec, params, "resolution", "15s")
    if resolution < 0.001:  # Prometheus' timestamps are whole milliseconds
        raise UsageError(f"source {shown_url(spec)!r}: resolution is at least 1ms, got "
                         f"{params['resolution']!r}")
    expr = params.get("selector") or params.get("query") or ""
    run = params.get("run") or dict(_MATCHER.findall(expr)).get("run") or expr
    return PromSpec(
        base=f"{url.scheme}://{url.netloc}{url.path.rstrip('/')}",
        selector=params.get("selector"),
        query=params.get("query"),
        name=params.get("name"),
        start=_named(spec, "start", lambda: timestamp(params.get("start", "-24h"), now)),
        end=_named(spec, "end", lambda: timestamp(params["end"], now)) if "end" in params
        else None,
        resolution=resolution,
        axis=axis,
        run=run,
        late=_duration(spec, params, "late", f"{LATE:g}s"),
    )


def _duration(spec: str, params: dict[str, str], key: str, default: str) -> float:
    return _named(spec, key, lambda: seconds(params.get(key, default)))


def _named(spec: str, key: str, parse: Callable[[], float]) -> float:
    """`parse()`, its UsageError naming the source and the setting."""
    try:
        return parse()
    except UsageError as exc:
        raise UsageError(f"source {shown_url(spec)!r}: {key}: {exc}") from None


class PrometheusSource(LiveSource):
    """Samples of the series a selector or PromQL query names, read and polled by time."""

    kind = "prom+http://HOST:9090?selector={run=\"NAME\"} (or ?query=PROMQL&name=METRIC)"
    example = 'prom+http://127.0.0.1:9090?selector={run="grpo-7b"}&start=-6h'

    def __init__(self, spec: str, api: PrometheusApi | None = None):
        super().__init__(spec)
        self.prom = parse_spec(spec, time.time())
        # what messages and reports show: never a user:password@ from the URL
        self.shown = spec.replace(self.prom.base, self.api_base(), 1) if "@" in spec else spec
        self.api = api or PrometheusApi(self.prom.base)
        self._start = self.prom.start
        self._done = self._start  # everything at or before this time has been read
        self._counts: dict[str, int] = {}
        self._last: dict[str, float] = {}  # per series, the newest sample time delivered

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.startswith(SCHEMES)

    def api_base(self) -> str:
        scheme, _, rest = self.prom.base.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"

    def read(self) -> Run:
        self._done, self._counts, self._last = self._start, {}, {}
        poll = self.poll()
        poll.run.series = poll.series
        return poll.run

    def poll(self) -> Poll:
        now = upper = time.time()
        raw, late = self.prom.selector is not None, self.prom.late
        if not raw:  # a grid point may change until every sample before it is stored
            upper -= max(self.prom.resolution, late)
        if self.prom.end is not None:
            upper = min(upper, self.prom.end)
        # raw: ask again for the last `late` s, where samples may have been stored since
        lower = max(self._start, self._done - late) if raw else self._done
        found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        if upper > lower:
            read = self._raw if raw else self._grid
            fix = "the answer is not what a Prometheus server sends; check the URL names one"
            chunks = decoded(self.shown, "series", lambda: read(lower, upper), fix)
            for name, steps, values in chunks:
                found.setdefault(name, []).append(
                    (np.asarray(steps, np.int64), np.asarray(values, np.float64))
                )
            self._done = max(self._done, upper)
        series = {n: merge_chunks(n, parts, self.step_key) for n, parts in sorted(found.items())}
        end = self.prom.end
        ended = end is not None and self._done >= end and (not raw or now >= end + late)
        points = sum(len(s) for s in series.values())
        return Poll(series=series, run=self._run(), ended=ended, points=points)

    @property
    def step_key(self) -> str:
        return "time" if self.prom.axis == "time" else "sample"

    def cursor(self) -> dict[str, Any]:
        return {"version": _CURSOR_VERSION, "start": self._start, "done": self._done,
                "counts": dict(self._counts), "last": dict(self._last)}

    def restore(self, cursor: dict[str, Any]) -> None:
        check_cursor_version(cursor, _CURSOR_VERSION, self.shown)
        self._start = float(cursor["start"])
        self._done = float(cursor["done"])
        self._counts = {str(k): int(v) for k, v in cursor.get("counts", {}).items()}
        # a cursor saved before "last" was kept: each series was read up to "done"
        last = cursor.get("last", dict.fromkeys(self._counts, self._done))
        self._last = {str(k): float(v) for k, v in last.items()}

    # -- reading ------------------------------------------------------------------------

    def _raw(self, lo: float, hi: float) -> list[tuple[str, list[int], list[float]]]:
        """Raw samples with lo < t <= hi that no earlier poll delivered (t after the
        series' newest delivered), in windows, each series' index continuing."""
        out = []
        while lo < hi:
            top = min(hi, lo + _RAW_WINDOW)
            # Prometheus reads whole milliseconds: ask up to `top` rounded up, from `lo`
            # rounded down, so no sample between a window's edge and its rounding is lost
            top_ms, lo_ms = math.ceil(top * 1000), math.floor(lo * 1000)
            data = self.api.get("/api/v1/query", {
                "query": f"{self.prom.selector}[{max(1, top_ms - lo_ms)}ms]",
                "time": f"{top_ms // 1000}.{top_ms % 1000:03d}",
            })
            for item in sorted(_matrix(data, self.shown), key=lambda r: self._name(r["metric"])):
                name = self._name(item["metric"])
                after = max(lo, self._last.get(name, self._start))
                samples = [
                    (float(t), v) for t, v in item.get("values") or [] if after < float(t) <= top
                ]
                first = self._counts.get(name, 0)
                self._counts[name] = first + len(samples)
                if samples:
                    self._last[name] = samples[-1][0]
                steps = [self._step(t, first + i) for i, (t, _) in enumerate(samples)]
                out.append((name, steps, [float(v) for _, v in samples]))
            lo = top
        return out

    def _grid(self, lo: float, hi: float) -> list[tuple[str, list[int], list[float]]]:
        """A range query on the grid start + k * resolution, for grid times in (lo, hi]."""
        res = self.prom.resolution
        k = math.floor((lo - self._start) / res) + 1 if lo > self._start else 0
        last = math.floor((hi - self._start) / res)
        out = []
        while k <= last:
            top = min(last, k + _GRID_POINTS - 1)
            data = self.api.get("/api/v1/query_range", {
                "query": self.prom.query, "start": f"{self._start + k * res:.3f}",
                "end": f"{self._start + top * res:.3f}", "step": f"{res:g}",
            })
            for item in _matrix(data, self.shown):
                pairs = [(float(t), float(v)) for t, v in item.get("values") or []]
                steps = [self._step(t, round((t - self._start) / res)) for t, _ in pairs]
                out.append((self._name(item["metric"]), steps, [v for _, v in pairs]))
            k = top + 1
        return out

    def _step(self, t: float, index: int) -> int:
        return int(t) if self.prom.axis == "time" else index

    def _name(self, labels: dict[str, str]) -> str:
        base = self.prom.name or labels.get("__name__") or "value"
        skip = self.prom.fixed_labels() | {"__name__", "job", "instance"}
        rest = sorted((k, v) for k, v in labels.items() if k not in skip)
        if not rest:
            return base
        return base + "{" + ",".join(f'{k}="{v}"' for k, v in rest) + "}"

    def _run(self) -> Run:
        started = datetime.fromtimestamp(self._start).astimezone().isoformat()
        return Run(
            name=self.prom.run,
            source=self.shown,
            config={"prometheus": {"start": started, "resolution": self.prom.resolution}},
        )


def _matrix(data: Any, spec: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise SourceError(f"{spec}: expected a matrix of series from Prometheus, got {kind}")
    return list(data.get("result") or [])
