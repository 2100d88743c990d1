"""The daemon's HTTP endpoints, served by `httpserver.BoundedServer`.

- `/healthz`: the process and its scheduler are alive (liveness probe).
- `/readyz`: state loaded and the first discovery done (readiness probe).
- `/metrics`: Prometheus exposition of the daemon's registry.
- `/api/runs`, `/api/runs/<name or url-encoded key>`, `/api/alerts`: JSON.
- `/`, `/runs/<name or url-encoded key>`: HTML status pages (daemon/status_page.py).

Probes are always open. When a bearer token is configured, `/metrics`, `/api/*` and the
status pages require `Authorization: Bearer <token>` (any case of `Bearer`); the config
refuses a non-loopback address without one.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gatekeeper.daemon.httpserver import BoundedServer, SocketWriter

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


Route = Callable[["Handler"], None]


@dataclass
class Routes:
    """Exact paths and path prefixes to handlers; `auth` routes need the bearer token.

    Another module adds pages with `routes.add("/status", handler)`; a handler answers
    with `h.json(...)` or `h.send(...)` and reads `h.path`, `h.query` and `h.api`.
    """

    exact: dict[str, tuple[Route, bool]] = field(default_factory=dict)
    prefix: dict[str, tuple[Route, bool]] = field(default_factory=dict)

    def add(self, path: str, handler: Route, *, auth: bool = True, prefix: bool = False) -> None:
        (self.prefix if prefix else self.exact)[path] = (handler, auth)

    def find(self, path: str) -> tuple[Route, bool] | None:
        if path in self.exact:
            return self.exact[path]
        for start, found in self.prefix.items():
            if path.startswith(start):
                return found
        return None


def default_routes() -> Routes:
    routes = Routes()
    routes.add("/healthz", _healthz, auth=False)
    routes.add("/readyz", _readyz, auth=False)
    routes.add(
        "/metrics", lambda h: h.send(200, generate_latest(h.api.registry), CONTENT_TYPE_LATEST)
    )
    routes.add("/api/runs", lambda h: h.json(200, {"runs": h.api.runs()}))
    routes.add("/api/runs/", _run, prefix=True)
    routes.add("/api/alerts", lambda h: h.json(200, {"alerts": h.api.alerts()}))
    return routes


def _healthz(h: Handler) -> None:
    ok = h.api.healthy()
    h.json(200 if ok else 503, {"ok": ok})


def _readyz(h: Handler) -> None:
    ok = h.api.ready()
    h.json(200 if ok else 503, {"ready": ok})


def _run(h: Handler) -> None:
    found = h.api.run(unquote(h.path[len("/api/runs/") :]))
    if found is None:
        return h.json(404, {"error": "no such run"})
    h.json(200, found)


def authorized(header: str, token: str | None) -> bool:
    """`Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 7235), the
    token is compared in constant time."""
    if not token:
        return True
    scheme, _, given = header.strip().partition(" ")
    same = hmac.compare_digest(given.strip().encode(), token.encode())
    return same and scheme.lower() == "bearer"


class Handler(BaseHTTPRequestHandler):
    """Answers one request whose head the server already read (see httpserver)."""

    api: Api  # set on the subclass built per server
    routes: Routes
    server_version = "gatekeeper"
    query = ""  # the request's query string, for routes that take parameters

    def __init__(self, sock: socket.socket, addr: Any, head: bytes):
        self._head = head
        super().__init__(sock, addr, None)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(self._head)
        self.wfile = SocketWriter(self.request)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        self.path, self.query = url.path, url.query
        found = self.routes.find(self.path)
        if found is None:
            return self.json(404, {"error": f"no endpoint {self.path}"})
        route, auth = found
        if auth and not authorized(self.headers.get("Authorization", ""), self.api.token):
            return self.json(401, {"error": "bearer token required"}, auth=True)
        route(self)

    def json(self, code: int, data: Any, auth: bool = False) -> None:
        body = json.dumps(data, default=str).encode()
        self.send(code, body, "application/json", auth)

    def send(self, code: int, body: bytes, ctype: str, auth: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if auth:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(body)


class HttpServer:
    """Serves `Api` on address:port (threads and memory bounded; see httpserver)."""

    def __init__(
        self,
        api: Api,
        address: str,
        port: int,
        *,
        workers: int = 4,
        request_timeout: float = 10.0,
        max_connections: int = 1024,
        routes: Routes | None = None,
    ):
        self.routes = routes or default_routes()
        if routes is None:
            from gatekeeper.daemon.status_page import StatusPages, add_routes

            add_routes(self.routes, StatusPages(api.runs, api.run))
        handler = type("BoundHandler", (Handler,), {"api": api, "routes": self.routes})
        self.server = BoundedServer(
            address,
            port,
            handler,
            workers=workers,
            request_timeout=request_timeout,
            max_connections=max_connections,
        )

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
