"""Live = final for Prometheus sources, on random scrapes, polls and query modes.

A stand-in for Prometheus' HTTP API on a simulated clock, answering the two queries the
source makes as Prometheus does: an instant query of `selector[Nms]` at `time` (the raw
samples in the range, closed at both ends as in Prometheus 2.42, or left-open as in 3.x)
and `query_range` (at each grid time, the newest sample within the 5 min lookback). Each
sample carries the time its scrape began and is visible only once stored, up to `late`
seconds after that time, a target's samples stored in order (what `tests/sources/
test_prometheus.py`'s slow exporter makes a real Prometheus 2.42 do). The source is
polled at random moments and then read whole: every sample or grid point a poll gave
must be the whole read's, on the same step, and the raw polls must have given them all.

Found in the seventeenth session (before the fixes, 66 of 200 such draws differed): grid
points were read one resolution late, so a point a poll had passed could later gain or
change its value; and a 6 h raw window asked up to its end rounded to milliseconds lost
the sample on a whole second between two windows under left-open ranges."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from gatekeeper.sources.prometheus import PrometheusSource
from gatekeeper.sources.prometheus import source as prom_source

Sample = tuple[int, float, float]  # time (ms), value, when stored (s)


class Clock:
    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now


class StandIn:
    """Prometheus' `/api/v1/query` and `/api/v1/query_range` over `samples`, as the clock
    finds them stored."""

    def __init__(self, samples: dict[str, list[Sample]], clock: Clock, left_open: bool):
        self.samples, self.clock, self.left_open = samples, clock, left_open

    def _stored(self, name: str) -> list[tuple[int, float]]:
        return [(t, v) for t, v, stored in self.samples[name] if stored <= self.clock.now]

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if path == "/api/v1/query":
            return self._instant(params)
        assert path == "/api/v1/query_range"
        start, end, step = (round(float(params[k]) * 1000) for k in ("start", "end", "step"))
        result = []
        for name in self.samples:
            stored = self._stored(name)
            values = []
            for at in range(start, end + 1, step):
                before = [v for t, v in stored if at - 300_000 < t <= at]
                if before:
                    values.append([at / 1000, repr(before[-1])])
            if values:
                result.append({"metric": {"s": name}, "values": values})
        return {"resultType": "matrix", "result": result}

    def _instant(self, params: dict[str, str]) -> dict[str, Any]:
        at = round(float(params["time"]) * 1000)
        window = int(params["query"].rsplit("[", 1)[1].removesuffix("ms]"))
        result = []
        for name in self.samples:
            values = [[t / 1000, repr(v)] for t, v in self._stored(name)
                      if (at - window < t if self.left_open else at - window <= t) and t <= at]
            if values:
                result.append({"metric": {"__name__": "m", "s": name}, "values": values})
        return {"resultType": "matrix", "result": result}


def _scrapes(r: random.Random, t0: float, late: float) -> dict[str, list[Sample]]:
    """1-3 series of scrapes at random intervals, each stored up to `late` s after its
    time, in order."""
    out = {}
    for k in range(r.randint(1, 3)):
        t, points = t0 + r.random() * 3, []
        stored = 0.0
        for _ in range(r.randint(5, 40)):
            t += r.choice([0.2, 0.5, 1.0, 1.0, 2.5, r.random() * 3])
            ms = round(t * 1000)
            stored = max(stored, ms / 1000 + r.random() * late * 0.95)
            points.append((ms, float(r.randint(0, 9)), stored))
        out[f"s{k}"] = points
    return out


def _draw(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(seed)
    late = r.choice([1.0, 2.0, 5.0])
    t0 = 1_700_000_000 + r.random() * 1000
    samples = _scrapes(r, t0, late)
    raw = r.random() < 0.6
    start = t0 - r.random() * 2
    if raw:
        spec = (f'prom+http://h:9?selector={{job="t"}}&start={start!r}&late={late:g}s'
                f'&axis={r.choice(["index", "time"])}')
    else:
        spec = (f"prom+http://h:9?query=m&name=m&start={start!r}&late={late:g}s"
                f"&resolution={r.choice(['100ms', '250ms', '1s', '2s'])}")
    clock = Clock(start + r.random() * 2)
    monkeypatch.setattr(prom_source, "time", SimpleNamespace(time=clock.time))  # its clock
    api = StandIn(samples, clock, left_open=r.random() < 0.5)
    last_stored = max(points[-1][2] for points in samples.values())
    source = PrometheusSource(spec, api=api)  # type: ignore[arg-type]
    live: dict[str, list[tuple[int, float]]] = {}
    while clock.now < last_stored + late + 3:
        for name, s in source.poll().series.items():
            live.setdefault(name, []).extend(zip(s.steps.tolist(), s.values.tolist(), strict=True))
        clock.now += r.choice([0.05, 0.1, 0.3, 1.0, 2.0, r.random() * 4])
    clock.now = last_stored + late + 60
    whole = {name: list(zip(s.steps.tolist(), s.values.tolist(), strict=True))
             for name, s in PrometheusSource(spec, api=api).read().series.items()}  # type: ignore[arg-type]
    assert set(live) <= set(whole), (seed, spec)
    for name, points in whole.items():
        polled = live.get(name, [])
        assert polled == points[: len(polled)], (seed, spec, name)
        if raw:  # every sample was stored `late` s before the polls ended
            assert len(polled) == len(points), (seed, spec, name)


@pytest.mark.parametrize("block", range(4))
def test_polled_prometheus_series_are_the_whole_read(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in range(block * 100, block * 100 + 100):
        _draw(seed, monkeypatch)
