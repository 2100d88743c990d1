"""`RestClient`: an MLflow tracking server's REST API (`/api/2.0/mlflow/...`) over httpx.

Every request is bounded: a timeout per request (GATEKEEPER_MLFLOW_TIMEOUT, default 20 s),
a cap on the answer's size (GATEKEEPER_MLFLOW_MAX_BYTES, default 64 MiB), and transient
failures (connection errors, 429, 5xx) retried with backoff within a total budget
(GATEKEEPER_MLFLOW_RETRY_SECONDS, default 60 s). Credentials come from the environment as
the MLflow client reads them (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and
MLFLOW_TRACKING_PASSWORD) and never appear in a message: errors show the server without
any user:password part.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import orjson

from gatekeeper.errors import SourceError, SourceNotFound
from gatekeeper.sources.base import decoded
from gatekeeper.sources.mlflow.client import (
    PAGE_SIZE,
    Page,
    Point,
    RunInfo,
    number,
    resolve_experiment_ids,
)
from gatekeeper.sources.rest import Answer, BoundedHttp, Limits, Transient

API = "/api/2.0/mlflow"
T = TypeVar("T")


def public_url(uri: str) -> str:
    """The URI without credentials, for messages."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class RestClient(BoundedHttp):
    def __init__(self, tracking_uri: str, *, timeout: float | None = None):
        env = os.environ
        parts = urlsplit(tracking_uri)
        token = env.get("MLFLOW_TRACKING_TOKEN")  # a bearer token wins over basic auth
        auth: tuple[str, str] | None = None
        if not token and env.get("MLFLOW_TRACKING_USERNAME"):
            auth = (env["MLFLOW_TRACKING_USERNAME"], env.get("MLFLOW_TRACKING_PASSWORD", ""))
        elif not token and parts.username:
            auth = (parts.username, parts.password or "")
        super().__init__(
            public_url(tracking_uri),
            Limits.from_env("GATEKEEPER_MLFLOW", retry_seconds=60, timeout=timeout),
            token=token,
            auth=auth,
            verify=env.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() != "true",
        )

    # -- the calls the source makes -----------------------------------------------------

    def get_run(self, run_id: str) -> RunInfo:
        what = f"run {run_id}"
        data = self._call("GET", "/runs/get", params={"run_id": run_id}, what=what)
        return self._shaped(what, lambda: _run_info(data.get("run") or {}))

    def history_page(self, run_id: str, key: str, token: str | None) -> Page:
        params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": PAGE_SIZE}
        if token:
            params["page_token"] = token
        what = f"history of {key!r} in {run_id}"
        data = self._call("GET", "/metrics/get-history", params=params, what=what)
        points = self._shaped(what, lambda: [
            Point(int(m.get("step", 0)), int(m.get("timestamp", 0)), number(m.get("value")))
            for m in data.get("metrics") or []
        ])
        return Page(points, data.get("next_page_token") or None)

    def search_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunInfo]:
        runs: list[RunInfo] = []
        token: str | None = None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": experiment_ids, "filter": filter_string, "max_results": 1000,
            }
            if token:
                body["page_token"] = token
            data = self._call("POST", "/runs/search", json=body, what="run search")
            runs.extend(self._shaped("run search", partial(_run_infos, data)))
            token = data.get("next_page_token")
            if not token:
                return runs

    def experiment_ids(self, names: list[str]) -> list[str]:
        return resolve_experiment_ids(names, self._experiment_id)

    def all_experiment_ids(self) -> list[str]:
        ids: list[str] = []
        token: str | None = None
        while True:
            body: dict[str, Any] = {"max_results": 1000, **({"page_token": token} if token else {})}
            data = self._call("POST", "/experiments/search", json=body, what="experiment search")
            ids.extend(str(e.get("experiment_id")) for e in data.get("experiments") or [])
            token = data.get("next_page_token")
            if not token:
                return ids

    def _experiment_id(self, name: str) -> str:
        data = self._call(
            "GET", "/experiments/get-by-name", params={"experiment_name": name},
            what=f"experiment {name!r}",
        )
        return str((data.get("experiment") or {}).get("experiment_id"))

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        body = {"run_id": run_id, "tags": [{"key": k, "value": v} for k, v in tags.items()]}
        self._call("POST", "/runs/log-batch", json=body, what=f"tag run {run_id}")

    def put_artifact(self, run: RunInfo, name: str, body: bytes) -> bool:
        """Upload through the server's artifact proxy; False when the run's artifacts live
        elsewhere (S3, a path on the server) and the server does not proxy them."""
        prefix = "mlflow-artifacts:"
        if not run.artifact_uri.startswith(prefix):
            return False
        path = urlsplit(run.artifact_uri).path.lstrip("/")
        url = f"/api/2.0/mlflow-artifacts/artifacts/{quote(path)}/{quote(name)}"
        self._send("PUT", url, content=body, what=f"upload {name} to run {run.run_id}")
        return True

    def run_url(self, run: RunInfo) -> str | None:
        return f"{self.base}/#/experiments/{run.experiment_id}/runs/{run.run_id}"

    def _shaped(self, what: str, fn: Callable[[], T]) -> T:
        """An answer decoded: one of another shape than MLflow's is the server's fault."""
        fix = "the answer is not what an MLflow tracking server sends; check the URL names one"
        return decoded(self.base, what, fn, fix)

    # -- transport ----------------------------------------------------------------------

    def _call(self, method: str, path: str, *, what: str, **kw: Any) -> dict[str, Any]:
        raw = self._send(method, API + path, what=what, **kw)
        try:
            data = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise SourceError(f"{self.base}: {what}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise SourceError(f"{self.base}: {what}: unexpected answer {str(data)[:100]}")
        return data

    def _send(self, method: str, url: str, *, what: str, **kw: Any) -> bytes:
        return self.request(
            method,
            url,
            judge=lambda answer: self._judge(answer, what),
            too_large=f"{self.base}: {what}: answer larger than {self.limits.max_bytes} bytes "
            "(GATEKEEPER_MLFLOW_MAX_BYTES)",
            gave_up=lambda problem: f"{self.base}: {what}: still failing after "
            f"{self.limits.budget:g}s of retries: {problem}; check the tracking server and "
            "retry later",
            **kw,
        )

    def _judge(self, answer: Answer, what: str) -> bytes | Transient:
        """The body, or why this attempt failed transiently and how long to wait."""
        status = answer.status
        if status < 300:
            return answer.body
        if status == 429 or status >= 500:
            after = answer.headers.get("Retry-After", "")
            return Transient(f"HTTP {status}", float(after) if after.isdigit() else None)
        detail = _error_text(answer.body)
        if status == 404 or "RESOURCE_DOES_NOT_EXIST" in detail:
            raise SourceNotFound(f"{self.base}: {what}: not found ({detail})")
        if status in (401, 403):
            raise SourceError(
                f"{self.base}: {what}: HTTP {status}, the server refused the credentials; "
                "set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD"
            )
        raise SourceError(f"{self.base}: {what}: HTTP {status} ({detail})")


def _error_text(body: bytes) -> str:
    try:
        data = orjson.loads(body)
        return f"{data.get('error_code', '')}: {str(data.get('message', ''))[:200]}"
    except (orjson.JSONDecodeError, AttributeError):
        return body[:200].decode("utf-8", "replace")


def _run_infos(data: dict[str, Any]) -> list[RunInfo]:
    return [_run_info(r) for r in data.get("runs") or []]


def _run_info(run: dict[str, Any]) -> RunInfo:
    info = run.get("info") or {}
    data = run.get("data") or {}
    tags = {t["key"]: t.get("value", "") for t in data.get("tags") or []}
    latest = {
        m["key"]: Point(int(m.get("step", 0)), int(m.get("timestamp", 0)), number(m.get("value")))
        for m in data.get("metrics") or []
    }
    run_id = info.get("run_id") or info.get("run_uuid") or ""
    return RunInfo(
        run_id=run_id,
        name=info.get("run_name") or tags.get("mlflow.runName") or run_id,
        status=str(info.get("status", "")),
        experiment_id=str(info.get("experiment_id", "")),
        artifact_uri=info.get("artifact_uri") or "",
        start_time=int(info.get("start_time") or 0),
        params={p["key"]: p.get("value", "") for p in data.get("params") or []},
        tags=tags,
        latest=latest,
    )
