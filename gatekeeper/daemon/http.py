"""The daemon's HTTP endpoints (stdlib server, one thread per request).

- `/healthz`: the process and its scheduler are alive (liveness probe).
- `/readyz`: state loaded and the first discovery done (readiness probe).
- `/metrics`: Prometheus exposition of the daemon's registry.
- `/api/runs`, `/api/runs/<name or url-encoded key>`, `/api/alerts`: JSON.
- `/`, `/runs/<name or url-encoded key>`: HTML status pages (daemon/status_page.py).

Probes are always open. When a bearer token is configured, `/metrics`, `/api/*` and the
status pages require `Authorization: Bearer <token>`; the config refuses a non-loopback address
without one.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("gatekeeper.http")


@dataclass
class Api:
    """What the endpoints read; callables so every request sees current state."""

    registry: CollectorRegistry
    healthy: Callable[[], bool]
    ready: Callable[[], bool]
    runs: Callable[[], list[dict[str, Any]]]
    run: Callable[[str], dict[str, Any] | None]
    alerts: Callable[[], list[dict[str, Any]]]
    token: str | None = None


class _Handler(BaseHTTPRequestHandler):
    api: Api  # set on the subclass built per server
    server_version = "gatekeeper"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = urlsplit(self.path).path
        if path == "/healthz":
            ok = self.api.healthy()
            return self._json(200 if ok else 503, {"ok": ok})
        if path == "/readyz":
            ok = self.api.ready()
            return self._json(200 if ok else 503, {"ready": ok})
        if not self._authorized():
            return self._json(401, {"error": "bearer token required"}, auth=True)
        if path == "/metrics":
            return self._send(200, generate_latest(self.api.registry), CONTENT_TYPE_LATEST)
        if path == "/api/runs":
            return self._json(200, {"runs": self.api.runs()})
        if path.startswith("/api/runs/"):
            found = self.api.run(unquote(path[len("/api/runs/") :]))
            if found is None:
                return self._json(404, {"error": "no such run"})
            return self._json(200, found)
        if path == "/api/alerts":
            return self._json(200, {"alerts": self.api.alerts()})
        if path == "/" or path.startswith("/runs/"):
            return self._status_page(path)
        self._json(404, {"error": f"no endpoint {path}"})

    def _status_page(self, path: str) -> None:
        from gatekeeper.daemon.status_page import CSP

        pages = self.server.pages  # type: ignore[attr-defined]
        body = pages.index() if path == "/" else pages.run_page(unquote(path[len("/runs/") :]))
        if body is None:
            return self._json(404, {"error": "no such run"})
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        if not self.api.token:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.api.token}".encode())

    def _json(self, code: int, data: Any, auth: bool = False) -> None:
        body = json.dumps(data, default=str).encode()
        self._send(code, body, "application/json", auth)

    def _send(self, code: int, body: bytes, ctype: str, auth: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if auth:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(body)


class HttpServer:
    """Serves `Api` on address:port in a background thread."""

    def __init__(self, api: Api, address: str, port: int):
        handler = type("Handler", (_Handler,), {"api": api})
        self.server = ThreadingHTTPServer((address, port), handler)
        from gatekeeper.daemon.status_page import StatusPages

        self.server.pages = StatusPages(api.runs, api.run)  # type: ignore[attr-defined]
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
