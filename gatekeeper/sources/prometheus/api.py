"""Prometheus' HTTP API (`/api/v1/...`), every request bounded in time and size.

Timeout per request GATEKEEPER_PROMETHEUS_TIMEOUT (default 20 s), answer cap
GATEKEEPER_PROMETHEUS_MAX_BYTES (default 64 MiB), transient failures (connection errors,
429, 5xx) retried with backoff for GATEKEEPER_PROMETHEUS_RETRY_SECONDS (default 30 s). A
bearer token comes from GATEKEEPER_PROMETHEUS_TOKEN and never appears in a message.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from gatekeeper.errors import SourceError
from gatekeeper.extras import load
from gatekeeper.sources.rest import Answer, BoundedHttp, Limits, Transient


class PrometheusApi(BoundedHttp):
    def __init__(self, base: str):
        # here, not at the top: httpx is the `prometheus` extra's, not the core's
        httpx = load("httpx", "prometheus", "reading Prometheus series")

        parts = httpx.URL(base.rstrip("/"))
        # credentials in the URL go to basic auth, never into a message
        auth = (parts.username, parts.password) if parts.username else None
        super().__init__(
            str(parts.copy_with(username=None, password=None)).rstrip("/"),
            Limits.from_env("GATEKEEPER_PROMETHEUS", retry_seconds=30),
            token=os.environ.get("GATEKEEPER_PROMETHEUS_TOKEN"),
            auth=auth,
        )

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]]) -> Any:
        """`data` of a successful answer; a PromQL error (bad query) raises at once."""

        def judge(answer: Answer) -> Any:
            if answer.status == 429 or answer.status >= 500:
                return Transient(f"HTTP {answer.status}")
            return self._data(path, answer.status, answer.body)

        return self.request(
            "GET",
            path,
            params=params,
            judge=judge,
            too_large=f"{self.base}: answer larger than {self.limits.max_bytes} bytes; narrow "
            "the selector or the time range (GATEKEEPER_PROMETHEUS_MAX_BYTES)",
            gave_up=lambda problem: f"{self.base}{path}: still failing after "
            f"{self.limits.budget:g}s of retries: {problem}; check the Prometheus server",
        )

    def _data(self, path: str, status: int, body: bytes) -> Any:
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise SourceError(f"{self.base}{path}: HTTP {status}, answer is not JSON") from None
        if not isinstance(answer, dict):
            raise SourceError(f"{self.base}{path}: HTTP {status}, answer is not a JSON object; "
                              "check the URL names a Prometheus server")
        if status != 200 or answer.get("status") != "success":
            detail = f"{answer.get('errorType', '')}: {str(answer.get('error', ''))[:300]}"
            raise SourceError(f"{self.base}{path}: HTTP {status}, {detail}")
        return answer.get("data")
