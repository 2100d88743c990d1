"""The daemon's HTTP endpoints: one WSGI app, served by waitress (see httpserver).

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
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CollectorRegistry, make_wsgi_app

from gatekeeper.daemon.httpserver import BoundedServer, WsgiApp

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
    metrics_app: WsgiApp | None = None  # /metrics (exporter.DaemonMetrics.wsgi_app)


Route = Callable[["Exchange"], None]


@dataclass
class Routes:
    """Exact paths and path prefixes to handlers; `auth` routes need the bearer token.

    Another module adds pages with `routes.add("/status", handler)`; a handler answers
    with `h.json(...)`, `h.send(...)` or `h.delegate(wsgi_app)` and reads `h.path`,
    `h.query` and `h.api`.
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
    routes.add("/metrics", _metrics)
    routes.add("/api/runs", lambda h: h.json(200, {"runs": h.api.runs()}))
    routes.add("/api/runs/", _run, prefix=True)
    routes.add("/api/alerts", lambda h: h.json(200, {"alerts": h.api.alerts()}))
    return routes


def _metrics(h: Exchange) -> None:
    # the daemon's (its run and policy statuses written directly) or prometheus_client's
    # own app: content negotiation (OpenMetrics), gzip, `name[]=` either way
    h.delegate(h.api.metrics_app or make_wsgi_app(h.api.registry))


def _healthz(h: Exchange) -> None:
    ok = h.api.healthy()
    h.json(200 if ok else 503, {"ok": ok})


def _readyz(h: Exchange) -> None:
    ok = h.api.ready()
    h.json(200 if ok else 503, {"ready": ok})


def _run(h: Exchange) -> None:
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


class Exchange:
    """One request as a route sees it (`path`, `query`, `api`); the route answers with
    `json`, `send` or `delegate` (another WSGI app answers)."""

    def __init__(self, api: Api, path: str, query: str):
        self.api, self.path, self.query = api, path, query
        self.answer: tuple[int, bytes, str, bool] = (500, b"", "text/plain", False)
        self.app: WsgiApp | None = None

    def json(self, code: int, data: Any, auth: bool = False) -> None:
        body = json.dumps(data, default=str).encode()
        self.send(code, body, "application/json", auth)

    def send(self, code: int, body: bytes, ctype: str, auth: bool = False) -> None:
        self.answer = (code, body, ctype, auth)

    def delegate(self, app: WsgiApp) -> None:
        self.app = app


class App:
    """The daemon's one WSGI app: routing, the bearer token, JSON errors."""

    def __init__(self, api: Api, routes: Routes):
        self.api, self.routes = api, routes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        # The raw target, not PATH_INFO: WSGI decodes %2F, and a run key is url-encoded.
        url = urlsplit(environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/"))
        h = Exchange(self.api, url.path, url.query)
        try:
            self._route(h, environ)
        except Exception:
            log.exception("http: answering %s failed", h.path)
            h.json(500, {"error": "internal error"})

        def answer(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            # one DEBUG line a request, as the stdlib server wrote; never its headers
            log.debug(
                "%s %s %s: %s",
                environ.get("REMOTE_ADDR"),
                environ["REQUEST_METHOD"],
                h.path,
                status,
            )
            return start_response(status, headers, *exc)

        if h.app is not None:
            return h.app(environ, answer)
        code, body, ctype, auth = h.answer
        headers = [("Content-Type", ctype), ("Content-Length", str(len(body)))]
        if auth:
            headers.append(("WWW-Authenticate", "Bearer"))
        answer(f"{code} {HTTPStatus(code).phrase}", headers)
        return [body]

    def _route(self, h: Exchange, environ: dict[str, Any]) -> None:
        method = environ["REQUEST_METHOD"]
        if method != "GET":
            return h.json(501, {"error": f"unsupported method {method}"})
        found = self.routes.find(h.path)
        if found is None:
            return h.json(404, {"error": f"no endpoint {h.path}"})
        route, auth = found
        if auth and not authorized(environ.get("HTTP_AUTHORIZATION", ""), self.api.token):
            return h.json(401, {"error": "bearer token required"}, auth=True)
        route(h)


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
        self.server = BoundedServer(
            address,
            port,
            App(api, self.routes),
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
