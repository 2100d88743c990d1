"""The daemon's HTTP listener under hostile clients: idle floods, trickling requests,
clients that vanish mid-answer or stop reading it, and the bearer scheme in any case."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from gatekeeper.daemon.http import Api, HttpServer, default_routes
from tests.daemon.harness import DaemonProcess, write_config


def _api(looked_up: list[str] | None = None) -> Api:
    """No runs; every run lookup is recorded in `looked_up` and finds nothing."""
    registry = CollectorRegistry()
    Counter("probe", "a counter to expose", registry=registry).inc()
    seen = looked_up if looked_up is not None else []

    def run(ident: str) -> None:
        seen.append(ident)

    return Api(
        registry=registry,
        healthy=lambda: True,
        ready=lambda: True,
        runs=lambda: [],
        run=run,
        alerts=lambda: [],
        token="t0ken-value",
    )


@pytest.fixture
def server() -> Iterator[HttpServer]:
    looked_up: list[str] = []
    srv = HttpServer(
        _api(looked_up), "127.0.0.1", 0, workers=2, request_timeout=1.0, max_connections=50
    )
    srv.looked_up = looked_up  # type: ignore[attr-defined]
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer t0ken-value", 200),
        ("bearer t0ken-value", 200),
        ("BEARER  t0ken-value", 200),
        ("Basic t0ken-value", 401),
        ("bearer wrong", 401),
        ("", 401),
    ],
)
def test_the_bearer_scheme_is_case_insensitive_and_the_token_is_not(
    server: HttpServer, header: str, code: int
) -> None:
    headers = {"Authorization": header} if header else {}
    resp = httpx.get(f"http://127.0.0.1:{server.port}/api/runs", headers=headers, timeout=5)
    assert resp.status_code == code


def test_answers_keep_their_codes_types_and_bodies(server: HttpServer) -> None:
    base, auth = f"http://127.0.0.1:{server.port}", {"Authorization": "Bearer t0ken-value"}
    denied = httpx.get(f"{base}/api/alerts", timeout=5)
    assert denied.headers["WWW-Authenticate"] == "Bearer"
    assert denied.json() == {"error": "bearer token required"}
    missing = httpx.get(f"{base}/nowhere", timeout=5)
    assert (missing.status_code, missing.json()) == (404, {"error": "no endpoint /nowhere"})
    assert httpx.post(f"{base}/api/runs", headers=auth, timeout=5).status_code == 501
    # a run key is url-encoded: %2F reaches the lookup as "/", not as a path separator
    run = httpx.get(f"{base}/api/runs/runs%2Fa%20b.jsonl", headers=auth, timeout=5)
    assert (run.status_code, run.json()) == (404, {"error": "no such run"})
    assert server.looked_up == ["runs/a b.jsonl"]  # type: ignore[attr-defined]


def test_metrics_are_negotiated_like_prometheus_client_serves_them(server: HttpServer) -> None:
    url, auth = f"http://127.0.0.1:{server.port}/metrics", {"Authorization": "Bearer t0ken-value"}
    plain = httpx.get(url, headers=auth, timeout=5)
    assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE probe_total counter" in plain.text
    om = httpx.get(url, headers={**auth, "Accept": "application/openmetrics-text"}, timeout=5)
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")
    zipped = httpx.get(url, headers={**auth, "Accept-Encoding": "gzip"}, timeout=5)
    assert zipped.headers["Content-Encoding"] == "gzip" and "probe_total" in zipped.text


def test_a_trickling_request_is_cut_at_the_request_timeout(server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        started = time.monotonic()
        closed_after = None
        for byte in b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"x" * 100:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.1)  # each byte well within any per-read timeout
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
    assert closed_after is not None and 0.9 <= closed_after <= 2.0, closed_after
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).status_code == 200


def _drain(s: socket.socket, seconds: float) -> int | None:
    """Bytes read from `s` until the server closed it (EOF or reset); None when it is
    still open after `seconds` without sending anything."""
    s.settimeout(seconds)
    got = 0
    try:
        while chunk := s.recv(65536):
            got += len(chunk)
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def _closed_within(s: socket.socket, seconds: float) -> bool:
    return _drain(s, seconds) is not None


def test_more_connections_than_the_cap_close_the_oldest_and_probes_still_answer() -> None:
    """80 idle sockets against a cap of 50: the 30 oldest are closed at once (long before
    the 5 s request timeout), and a probe is answered meanwhile."""
    srv = HttpServer(_api(), "127.0.0.1", 0, workers=2, request_timeout=5.0, max_connections=50)
    srv.start()
    started = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(80)]
    try:
        assert probe(srv.port) < 1.0
        assert all(_closed_within(s, 2.0) for s in socks[:30])
        assert time.monotonic() - started < 4.0
        assert not _closed_within(socks[-1], 0.2)  # the newest is still open
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_a_client_that_does_not_read_its_answer_is_cut_at_the_request_timeout() -> None:
    """The answer (8 MB, more than the socket buffers hold) must be read within the
    request timeout too: a client that stops reading is closed, not held forever."""
    routes = default_routes()
    routes.add("/big", lambda h: h.send(200, b"x" * 8_000_000, "text/plain"), auth=False)
    srv = HttpServer(_api(), "127.0.0.1", 0, workers=2, request_timeout=1.0, routes=routes)
    srv.start()
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", srv.port))
            s.sendall(b"GET /big HTTP/1.0\r\n\r\n")
            time.sleep(2.5)  # well past the timeout, reading nothing
            got = _drain(s, 5.0)
        assert got is not None and got < 8_000_000, got
        assert probe(srv.port) < 1.0
    finally:
        srv.stop()


def probe(port: int) -> float:
    """Seconds for a raw `GET /healthz` to be answered 200 (no client library overhead)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200"), answer
    return time.monotonic() - started


def _reset_after_request(port: int, path: str) -> None:
    """Send a request and vanish with a TCP reset before reading the answer."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    s.close()


def test_1000_idle_connections_cost_bounded_threads_and_memory_while_probes_answer(
    tmp_path: Path,
) -> None:
    """The daemon holds 1,000 connections that never send a byte; /healthz still answers
    fast, the thread count does not move and memory grows by a few MB; after
    `request_timeout` the daemon closes them all."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2200:
        pytest.skip(f"needs 2,200 file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2200), hard))
    config = write_config(tmp_path, http={"request_timeout": "4s", "max_connections": 1024})
    daemon = DaemonProcess(config).start()
    socks: list[socket.socket] = []
    try:
        time.sleep(0.5)
        before, probe_before = daemon.proc_status(), probe(daemon.port)
        started = time.monotonic()
        for _ in range(1000):
            socks.append(socket.create_connection(("127.0.0.1", daemon.port), timeout=5))
        opened = time.monotonic() - started
        probe_during = probe(daemon.port)
        during = daemon.proc_status()
        print(
            f"\n1000 idle: opened in {opened:.2f}s; /healthz {probe_before * 1000:.1f} ms before,",
            f"{probe_during * 1000:.1f} ms during; {before=} {during=}",
        )
        assert during["threads"] <= before["threads"] + 2, (before, during)
        assert during["rss_kb"] - before["rss_kb"] < 20_000, (before, during)
        assert probe_during < 1.0
        for s in socks[:10]:  # the server ends idle connections at request_timeout
            s.settimeout(8)
            assert s.recv(1) == b""
    finally:
        for s in socks:
            s.close()
        assert daemon.stop() == 0


def _open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_clients_that_vanish_mid_request_leave_no_traceback_and_no_socket_behind(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    daemon = DaemonProcess(config, level="debug").start()
    assert daemon.proc is not None
    try:
        time.sleep(0.5)
        before = _open_fds(daemon.proc.pid)
        for i in range(30):
            _reset_after_request(daemon.port, "/metrics" if i % 2 else "/api/alerts")
            with socket.create_connection(("127.0.0.1", daemon.port)) as s:
                s.sendall(b"GET /api/runs HTTP/1.0\r\n\r\n")
                s.shutdown(socket.SHUT_RDWR)  # gone before the answer is written
        assert daemon.get("/healthz").status_code == 200
        # every one of the 60 connections is closed on the daemon's side too
        assert daemon.wait(lambda: _open_fds(daemon.proc.pid) <= before + 2, 5), (
            before,
            _open_fds(daemon.proc.pid),
        )
    finally:
        assert daemon.stop() == 0
    log = daemon.log.read_text()
    assert "Traceback" not in log and "Exception" not in log, log[-2000:]


def test_a_stop_after_the_loop_closed_its_sockets_writes_to_none_of_them() -> None:
    """The serving loop closes its sockets (the trigger among them) once it sees the stop
    flag. A stop that came between that and the thread's end pulled the closed trigger:
    EBADF ended the daemon's stop as an internal error (exit 70) before the scheduler,
    the channels and the leases were stopped (a replica resumed from SIGSTOP and sent
    SIGTERM did so), and a reused descriptor number would have had a byte written into
    another file. Here the loop's close is held open 0.3 s so the stop lands in it."""
    srv = HttpServer(_api(), "127.0.0.1", 0, workers=1, request_timeout=1.0, max_connections=5)
    bounded = srv.server
    close, closed = bounded._close, threading.Event()

    def lingering_close() -> None:
        close()
        closed.set()
        time.sleep(0.3)  # the thread is still alive when stop() runs

    bounded._close = lingering_close  # type: ignore[method-assign]
    srv.start()
    port = srv.port
    bounded._stopping.set()  # the loop ends its turn (a tick) and closes, as on a stop
    assert closed.wait(5)
    assert bounded.thread.is_alive()
    srv.stop()  # raised OSError (EBADF) from pull_trigger before the fix
    assert not bounded.thread.is_alive()
    with pytest.raises(OSError):  # closed once, by the loop
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
