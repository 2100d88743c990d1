"""Local HTTP endpoints that record what notifiers send them (and can misbehave)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers import wait_until

# (status, headers, body) for the n-th request (0-based); None means answer normally.
Script = Callable[[int], "tuple[int, dict[str, str], bytes] | None"]


class Recorder:
    """Records JSON bodies posted to it. `lark_secret` makes it verify Lark signatures."""

    def __init__(
        self,
        *,
        lark_secret: str | None = None,
        script: Script | None = None,
        delay: float = 0.0,
        port: int = 0,
    ):
        self.bodies: list[dict[str, Any]] = []
        self.idempotency: list[str | None] = []  # each recorded body's Idempotency-Key
        self.requests = 0
        self.bad_signatures = 0
        self.times: list[float] = []
        self.lark_secret = lark_secret
        self.script = script
        self.delay = delay
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                rec.handle(self, json.loads(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def handle(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self.lock:
            n = self.requests
            self.requests += 1
            self.times.append(time.monotonic())
        if self.delay:
            time.sleep(self.delay)
        scripted = self.script(n) if self.script else None
        if scripted is not None:
            status, headers, raw = scripted
            return self._answer(h, status, raw, headers)
        if self.lark_secret is not None:
            ts = str(body.get("timestamp", ""))
            key = f"{ts}\n{self.lark_secret}".encode()
            want = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
            if not ts or body.get("sign") != want or abs(time.time() - int(ts)) > 3600:
                with self.lock:
                    self.bad_signatures += 1
                return self._answer(h, 200, b'{"code":19021,"msg":"sign match fail"}')
            with self.lock:
                self.bodies.append(body)
            return self._answer(h, 200, b'{"code":0,"msg":"success"}')
        with self.lock:
            self.bodies.append(body)
            self.idempotency.append(h.headers.get("Idempotency-Key"))
        self._answer(h, 200, b"ok")

    def _answer(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        raw: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def wait(self, pred: Callable[[], bool], timeout: float = 20.0) -> bool:
        return wait_until(pred, timeout, every=0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Trickler:
    """A receiver that reads the request, sends `prefix` at once, then `answer` one byte
    every `period` seconds (at most `limit` seconds): each read of the client sees data
    in time, so only a deadline on the whole request cuts it."""

    def __init__(self, answer: bytes, prefix: bytes = b"", period: float = 0.3, limit: float = 30):
        self.answer, self.prefix, self.period, self.limit = answer, prefix, period, limit
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.cut_after: list[float] = []  # seconds until the client hung up, per request
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            started = time.monotonic()
            conn.sendall(self.prefix)
            for i in range(len(self.answer)):
                if time.monotonic() - started > self.limit:
                    break
                try:
                    conn.sendall(self.answer[i : i + 1])
                except OSError:
                    break
                time.sleep(self.period)
            self.cut_after.append(time.monotonic() - started)

    def close(self) -> None:
        self.listener.close()

    def wait_cut(self, timeout: float = 5.0) -> float:
        end = time.monotonic() + timeout
        while not self.cut_after and time.monotonic() < end:
            time.sleep(0.05)
        return self.cut_after[0] if self.cut_after else float("inf")
