"""Prometheus series read by a real Prometheus (Debian's 2.42): a history backfilled with
its own `promtool tsdb create-blocks-from openmetrics`, and a live gauge it scrapes from a
prometheus_client (0.2x) exporter in this process."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gatekeeper.errors import UsageError
from gatekeeper.sources import open_live_source, open_source
from gatekeeper.sources.base import LiveSource
from gatekeeper.sources.prometheus import PrometheusSource
from gatekeeper.sources.prometheus.source import parse_spec
from tests.daemon.harness import free_port
from tests.helpers import gatekeeper, write_policy
from tests.sources.prom_server import MISSING, PROMETHEUS, PROMTOOL, prometheus

pytestmark = pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason=MISSING)
T0 = int(time.time()) - 3 * 3600  # backfilled history starts here, every 15 s
GOOD = [90, 91, 92, 93, 94]
BAD = [90, 91, "NaN", 93, 94]


class Prom:
    def __init__(self, url: str, gauge: Gauge):
        self.url = url
        self.gauge = gauge


SLOW = 0.4  # s the slow exporter takes to answer: its samples reach the TSDB that late


class SlowExporter(BaseHTTPRequestHandler):
    """A /metrics that answers SLOW s after the scrape began (a busy trainer's exporter):
    Prometheus stamps the sample with the scrape's start and stores it when the answer
    is in. `slow_scrapes` counts the scrapes, so a lost sample is a gap in the values."""

    scrapes = 0

    def do_GET(self) -> None:
        SlowExporter.scrapes += 1
        n = SlowExporter.scrapes
        time.sleep(SLOW)
        body = f"# TYPE slow_scrapes gauge\nslow_scrapes {n}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # a scrape given up on (timeout) closed it
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _openmetrics() -> str:
    lines = ["# TYPE gpu_util gauge"]
    for run, values in (("good", GOOD), ("bad", BAD)):
        lines += [
            f'gpu_util{{run="{run}",gpu="0"}} {v} {T0 + 15 * i}' for i, v in enumerate(values)
        ]
    return "\n".join(lines + ["# EOF", ""])


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    tmp = tmp_path_factory.mktemp("prom")
    registry = CollectorRegistry()
    gauge = Gauge("trainer_loss", "loss", ["run"], registry=registry)
    exporter_port = free_port()
    server, _ = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    slow = ThreadingHTTPServer(("127.0.0.1", free_port()), SlowExporter)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    scrape = [{
        "job_name": "trainer", "scrape_interval": "300ms",
        "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}, {
        "job_name": "slow", "scrape_interval": "1s", "scrape_timeout": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{slow.server_address[1]}"]}]}]
    try:
        with prometheus(tmp, _openmetrics(), scrape) as url:
            yield Prom(url, gauge)
    finally:
        server.shutdown()
        slow.shutdown()


def _policy(tmp: Path) -> Path:
    return write_policy(
        tmp / "prom.yaml",
        """
        version: 1
        name: cluster
        rules:
          - id: gpu-busy
            metric: gpu_util{gpu="0"}
            check: {min: 50}
        """,
    )


def _check(tmp: Path, source: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp / "verdict.json"
    proc = gatekeeper("check", source, "-p", str(_policy(tmp)), "--json", str(out))
    return proc, (json.loads(out.read_text()) if out.exists() else {})


def test_spec_forms() -> None:
    spec = parse_spec('prom+http://h:9090?selector={run="a",job="x"}&start=-1h', 10000.0)
    assert spec.base == "http://h:9090" and spec.run == "a" and spec.start == 10000.0 - 3600
    assert spec.fixed_labels() == {"run", "job"}
    with pytest.raises(UsageError, match="expected prom"):
        parse_spec("prom+http://h:9090?start=-1h", 0.0)


def test_every_raw_sample_on_its_index_and_nan_is_an_error_at_its_step(
    prom: Prom, tmp_path: Path
) -> None:
    window = f"&start={T0 - 60}&end={T0 + 3600}"
    good = f'prom+{prom.url}?selector={{run="good"}}{window}'
    run = open_source(good).read()
    assert isinstance(open_source(good), PrometheusSource)
    s = run.series['gpu_util{gpu="0"}']
    assert s.steps.tolist() == [0, 1, 2, 3, 4] and s.values.tolist() == GOOD
    proc, _ = _check(tmp_path, good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, verdict = _check(tmp_path, f'prom+{prom.url}?selector={{run="bad"}}{window}')
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = next(r for r in verdict["results"] if r["rule"] == "gpu-busy")
    assert res["status"] == "error" and res["step"] == 2
    timed = open_source(f'prom+{prom.url}?selector={{run="good"}}{window}&axis=time').read()
    assert timed.series['gpu_util{gpu="0"}'].steps.tolist() == [T0 + 15 * i for i in range(5)]


def test_promql_range_query_on_a_grid(prom: Prom) -> None:
    query = 'max by (run) (gpu_util{run="good"})'
    src = open_source(
        f"prom+{prom.url}?query={query}&name=gpu_max&resolution=15s&start={T0}&end={T0 + 60}"
    )
    run = src.read()
    assert run.series["gpu_max"].steps.tolist() == [0, 1, 2, 3, 4]
    assert run.series["gpu_max"].values.tolist() == GOOD


def test_live_poll_reads_only_samples_scraped_since_the_last_poll(prom: Prom) -> None:
    prom.gauge.labels(run="live").set(1.0)
    src = open_live_source(f'prom+{prom.url}?selector={{run="live"}}&start=-10s')
    seen: list[float] = []
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        poll = src.poll()
        seen += poll.series["trainer_loss"].values.tolist() if poll.series else []
        time.sleep(0.3)
    assert seen and set(seen) == {1.0}
    prom.gauge.labels(run="live").set(float("nan"))
    new: list[float] = []
    steps: list[int] = []
    deadline = time.monotonic() + 20
    while not new and time.monotonic() < deadline:
        time.sleep(0.5)
        poll = src.poll()
        if poll.series:
            s = poll.series["trainer_loss"]
            steps, new = s.steps.tolist(), [v for v in s.values.tolist() if v != 1.0]
    assert new and all(v != v for v in new)  # NaN scraped, read as NaN
    assert steps[0] >= len(seen)  # indices continue where the last poll stopped


def _polled_and_whole_alike(
    src: LiveSource, spec: str, metric: str, n: int
) -> list[tuple[int, float]]:
    """At least `n` points of `metric` polled every 0.1 s (at most 30 s), the same steps and
    values as the start of the whole read that follows."""
    live: list[tuple[int, float]] = []
    deadline = time.monotonic() + 30
    while len(live) < n and time.monotonic() < deadline:
        for s in src.poll().series.values():
            live += zip(s.steps.tolist(), s.values.tolist(), strict=True)
        time.sleep(0.1)
    whole = open_source(spec).read().series[metric]
    assert len(live) >= n, live
    assert live == list(zip(whole.steps.tolist(), whole.values.tolist(), strict=True))[:len(live)]
    return live


def test_live_poll_keeps_samples_stored_after_their_time(prom: Prom) -> None:
    """A scraped sample carries the scrape's start time but is stored when the answer is
    in: a poll in between must not step past it for good. Polled every 0.1 s, each sample
    of an exporter slow by SLOW s lands in the live series, on the index the whole read
    gives it (it failed under load as a NaN one index early live: the live verdict must
    be the final one on the same data)."""
    spec = f'prom+{prom.url}?selector={{__name__="slow_scrapes"}}&start={time.time() - 1:.3f}'
    src = open_live_source(spec)
    live = _polled_and_whole_alike(src, spec, "slow_scrapes", 3)
    values = [v for _, v in live]
    assert values == [values[0] + i for i in range(len(values))]  # no scrape missed
    # a saved cursor goes on where the polls stopped; one saved before it kept each
    # series' newest time (no "last") takes "done" for it: nothing is delivered twice
    for cursor in (src.cursor(), {k: v for k, v in src.cursor().items() if k != "last"}):
        again = open_live_source(spec)
        again.restore(cursor)
        new = [p for s in again.poll().series.values()
               for p in zip(s.steps.tolist(), s.values.tolist(), strict=True)]
        assert all(step >= len(live) and value > values[-1] for step, value in new), new


def test_live_grid_points_wait_until_every_sample_before_them_is_stored(prom: Prom) -> None:
    """A `query=` grid point takes the newest sample at or before its time; a sample stored
    after its time (the exporter slow by SLOW s) changes the points from its time on. Read
    one resolution late, as before `late=`, the polls took those points from the sample
    before it (~3 in 10 of them at 100 ms; the whole read gave the new value); read `late`
    s late, live = whole, value by value (Prometheus 2.42; 3 s: ~7x SLOW, for a loaded
    machine)."""
    spec = (f"prom+{prom.url}?query=slow_scrapes&name=n&resolution=100ms&late=3s"
            f"&start={time.time():.3f}")
    live = _polled_and_whole_alike(open_live_source(spec), spec, "n", 40)
    assert len({v for _, v in live}) >= 3, live


@pytest.mark.parametrize(("param", "error"), [
    ("resolution=0s", "resolution is at least 1ms, got '0s'"),  # was exit 70, dividing by 0
    ("late=soon", "late: expected a duration like 30s, 5m or 4h, got 'soon'"),
    # exit 70 before (the run's config shows the start as a date)
    ("start=nan", "start: expected a time of the years 1970 to 9999, got 'nan'"),
    ("start=1e20", "start: expected a time of the years 1970 to 9999, got '1e20'"),
    ("end=inf", "end: expected a time of the years 1970 to 9999, got 'inf'"),
])
def test_a_bad_setting_in_the_url_is_exit_2_naming_it_not_the_password(
    tmp_path: Path, param: str, error: str
) -> None:
    spec = f"prom+http://127.0.0.1:9?query=up&name=u&{param}"
    proc, _ = _check(tmp_path, spec.replace("//", "//u:s3cret@"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"gatekeeper: error: source {spec!r}: {error}"


def test_a_malformed_host_is_exit_2() -> None:
    """Was exit 70: urlsplit's ValueError."""
    proc = gatekeeper("check", "prom+http://u:s3cret@[::1?query=up", "-p", "policies")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "gatekeeper: error: Prometheus URL 'http://[::1?query=up': Invalid IPv6 URL; fix the "
        "host or port"), proc.stderr


def test_daemon_discovery_lists_one_run_per_label_value(prom: Prom) -> None:
    from gatekeeper.sources.prometheus.discover import PrometheusFilter

    found = PrometheusFilter(
        url=prom.url, selector="{__name__=\"gpu_util\"}", start=str(T0 - 60)
    ).runs()
    assert len(found) == 2 and all(s.startswith(f"prom+{prom.url}?selector=") for s in found)
    runs = {open_source(s).read().name: open_source(s).read() for s in found}
    assert sorted(runs) == ["bad", "good"]
    assert runs["good"].series['gpu_util{gpu="0"}'].values.tolist() == GOOD
    late = PrometheusFilter(url=prom.url, selector="{__name__=\"gpu_util\"}", late="35s")
    assert [s.removesuffix("&late=35s") for s in late.runs()] == [
        s.replace(f"start={T0 - 60}", "start=-24h") for s in found]  # unset: specs unchanged
    assert {open_live_source(s).prom.late for s in late.runs()} == {35.0}


MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": []}}
NOT_PROMETHEUS = {  # JSON a server that is not Prometheus (or a proxy) may answer
    "a list": [1, 2],
    "a series without labels": {**MATRIX, "data": {"resultType": "matrix",
                                                   "result": [{"values": [[1, "1"]]}]}},
    "a sample time a word": {**MATRIX, "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x"}, "values": [["soon", "1"]]}]}},
    "a sample not a pair": {**MATRIX, "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "x"}, "values": [[1]]}]}},
}


@pytest.mark.parametrize("answer", sorted(NOT_PROMETHEUS))
def test_a_server_answering_json_that_is_not_prometheus_is_exit_2(
    answer: str, tmp_path: Path
) -> None:
    """Any URL may be named: JSON of another shape than Prometheus 2.42's query API
    answers (/api/v1/query: a matrix of {metric, values: [[time, "value"]]}) was exit 70
    (a KeyError or ValueError while decoding). It is exit 2, one line naming the run."""
    from tests.helpers import gatekeeper_in_process
    from tests.sources.conftest import json_server

    with json_server(lambda path: NOT_PROMETHEUS[answer]) as base:
        proc = gatekeeper_in_process("check", f"prom+{base}?selector={{job=\"x\"}}", "-p",
                                     str(_policy(tmp_path)))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (error,) = proc.stderr.strip().splitlines()
    assert error.startswith("gatekeeper: error: ") and "127.0.0.1" in error, error
    assert "Prometheus" in error, error


class _LeftOpenPrometheus:
    """Prometheus 3's range selector as its HTTP API answers an instant query of
    `selector[Nms]` at `time`: the samples with time - N < t <= time, `time` taken in
    whole milliseconds (Prometheus 3 is not packaged here; 2.42 includes t = time - N)."""

    def __init__(self, times_ms: list[int]):
        self.times_ms = times_ms

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        assert path == "/api/v1/query"
        at = round(float(params["time"]) * 1000)
        window = int(params["query"].rsplit("[", 1)[1].removesuffix("ms]"))
        values = [[t / 1000, "1"] for t in self.times_ms if at - window < t <= at]
        return {"resultType": "matrix",
                "result": [{"metric": {"__name__": "m"}, "values": values}]}


def test_a_sample_at_a_window_edge_is_read_once_when_ranges_are_left_open() -> None:
    """`selector=` reads in 6 h windows. A window ending 0.4 ms before a whole second E was
    asked up to E (rounded) and the next one from exactly E: under Prometheus 3's
    left-open ranges the sample at E fell between them, read by neither. The windows are
    now asked in whole milliseconds, from the start rounded down."""
    edge = 1_700_000_000  # s
    start = edge - 0.0004 - 6 * 3600
    times = [round((start + 0.5) * 1000) + 500 * i for i in range(10)]  # 0.5 s apart
    times += [edge * 1000, edge * 1000 + 500]  # the sample on the edge, and one after it
    src = PrometheusSource(f"prom+http://h:9?selector={{job=\"t\"}}&start={start!r}&axis=time",
                           api=_LeftOpenPrometheus(sorted(times)))  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "time", lambda: edge + 7 * 3600.0)  # a second 6 h window
        run = src.read()
    assert run.series["m"].steps.tolist() == [t // 1000 for t in sorted(times)]
