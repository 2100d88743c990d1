"""Prometheus' HTTP API (`/api/v1/...`), every request bounded in time and size.

Timeout per request GATEKEEPER_PROMETHEUS_TIMEOUT (default 20 s), answer cap
GATEKEEPER_PROMETHEUS_MAX_BYTES (default 64 MiB), transient failures (connection errors,
429, 5xx) retried with backoff for GATEKEEPER_PROMETHEUS_RETRY_SECONDS (default 30 s). A
bearer token comes from GATEKEEPER_PROMETHEUS_TOKEN and never appears in a message.
"""

from __future__ import annotations

import os
import random
import time
from typing import TYPE_CHECKING, Any

import orjson

from gatekeeper.errors import SourceError, SourceUnavailable

if TYPE_CHECKING:
    import httpx


class PrometheusApi:
    def __init__(self, base: str):
        import httpx  # here, not at the top: every `check` imports the source kinds

        env = os.environ
        parts = httpx.URL(base.rstrip("/"))
        # credentials in the URL go to basic auth, never into a message
        auth = (parts.username, parts.password) if parts.username else None
        self.base = str(parts.copy_with(username=None, password=None)).rstrip("/")
        self.timeout = float(env.get("GATEKEEPER_PROMETHEUS_TIMEOUT", "20"))
        self.max_bytes = int(env.get("GATEKEEPER_PROMETHEUS_MAX_BYTES", str(64 << 20)))
        self.budget = float(env.get("GATEKEEPER_PROMETHEUS_RETRY_SECONDS", "30"))
        headers = {"User-Agent": "gatekeeper"}
        if env.get("GATEKEEPER_PROMETHEUS_TOKEN"):
            headers["Authorization"] = f"Bearer {env['GATEKEEPER_PROMETHEUS_TOKEN']}"
        self._http = httpx.Client(
            base_url=self.base, headers=headers, auth=auth, timeout=self.timeout
        )
        self.requests = 0

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]]) -> Any:
        """`data` of a successful answer; a PromQL error (bad query) raises at once."""
        import httpx

        deadline = time.monotonic() + self.budget
        delay = 0.5
        while True:
            self.requests += 1
            problem = ""
            try:
                with self._http.stream("GET", path, params=params) as resp:
                    body = self._body(resp)
                    status = resp.status_code
            except httpx.TransportError as exc:
                status, body, problem = 0, b"", type(exc).__name__
            if status and status != 429 and status < 500:
                return self._data(path, status, body)
            problem = problem or f"HTTP {status}"
            if deadline - time.monotonic() <= delay:
                raise SourceUnavailable(
                    f"{self.base}{path}: still failing after {self.budget:g}s of retries: "
                    f"{problem}; check the Prometheus server"
                )
            time.sleep(delay * random.uniform(0.8, 1.0))
            delay = min(delay * 2, 10.0)

    def _body(self, resp: httpx.Response) -> bytes:
        chunks, size = [], 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise SourceError(
                    f"{self.base}: answer larger than {self.max_bytes} bytes; narrow the "
                    "selector or the time range (GATEKEEPER_PROMETHEUS_MAX_BYTES)"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _data(self, path: str, status: int, body: bytes) -> Any:
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise SourceError(f"{self.base}{path}: HTTP {status}, answer is not JSON") from None
        if status != 200 or answer.get("status") != "success":
            detail = f"{answer.get('errorType', '')}: {str(answer.get('error', ''))[:300]}"
            raise SourceError(f"{self.base}{path}: HTTP {status}, {detail}")
        return answer.get("data")
