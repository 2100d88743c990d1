"""`StoreClient`: a local MLflow store (`file:` / `mlruns/` file store, `sqlite:///db`),
opened through mlflow's own store classes, so the layout and schema migrations stay
mlflow's business. Needs the mlflow client: `pip install 'gatekeeper[mlflow]'`.

Runs come back as the same protobuf messages the REST API sends (`Run.to_proto()`), so one
decoder serves both backends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from gatekeeper.errors import SourceError, SourceNotFound
from gatekeeper.extras import load
from gatekeeper.sources.base import decoded
from gatekeeper.sources.mlflow.client import (
    PAGE_SIZE,
    Page,
    Point,
    RunInfo,
    number,
    resolve_experiment_ids,
)
from gatekeeper.sources.mlflow.rest import _run_info

T = TypeVar("T")


def _mlflow() -> Any:
    load("mlflow.tracking", "mlflow", "reading a local MLflow store")
    return load("mlflow", "mlflow", "reading a local MLflow store")


def local_path(uri: str) -> str | None:
    """The file or folder of a local store (`file:///x`, `sqlite:////x.db`), else None."""
    if uri.startswith("file:"):
        return urlsplit(uri).path or None
    if uri.startswith("sqlite:"):
        return urlsplit(uri).path[1:] or None  # sqlite:///rel.db, sqlite:////abs.db
    return None


class StoreClient:
    def __init__(self, tracking_uri: str):
        mlflow = _mlflow()
        if tracking_uri.startswith("file:"):
            # mlflow 3 refuses file stores unless opted in; the user named one explicitly,
            # and gatekeeper only reads it (and tags runs with --annotate).
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri = tracking_uri
        self.requests = 0
        # Reads go to the store itself: it pages metric history (max_results + page_token),
        # which the client facade does not. A file store's files are checked before mlflow
        # reads them (filestore.py); writes (--annotate) go through the client.
        if tracking_uri.startswith("file:"):
            from gatekeeper.sources.mlflow.filestore import guarded_file_store

            self.store = guarded_file_store(tracking_uri)  # first: the client would mkdir
            self.client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri)
        else:
            path = local_path(tracking_uri)
            if path is not None and not os.path.isfile(path):
                # mlflow would create the database and its tables: a read writes nothing
                raise SourceNotFound(f"{tracking_uri}: no MLflow store at {path} (no such file)")
            self.client = self._open_sql(mlflow)
            self.store = self.client._tracking_client.store

    def _open_sql(self, mlflow: Any) -> Any:
        """The client of mlflow's SQL store; a file that is no MLflow database is an input
        error (sqlalchemy's DatabaseError), not a bug."""
        try:
            return mlflow.tracking.MlflowClient(tracking_uri=self.uri)
        except Exception as exc:
            if not type(exc).__module__.startswith("sqlalchemy"):
                raise
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise SourceError(
                f"{self.uri}: cannot open it as an MLflow store: {first[:200]}; name the "
                "database `mlflow server --backend-store-uri` or the mlflow client wrote"
            ) from None

    def _guard(self, what: str, fn: Any) -> Any:
        from mlflow.exceptions import MlflowException

        self.requests += 1
        try:
            return fn()
        except MlflowException as exc:
            code = getattr(exc, "error_code", "")
            if "RESOURCE_DOES_NOT_EXIST" in str(code) or "not found" in str(exc).lower():
                raise SourceNotFound(f"{self.uri}: {what}: not found") from None
            raise SourceError(f"{self.uri}: {what}: {str(exc)[:300]}") from None

    def _typed(self, what: str, fn: Callable[[], T]) -> T:
        """What the store read, converted: mlflow's stores hand back the values as they
        hold them (sqlite keeps a text in an INTEGER column; a file store's meta.yaml is
        guarded in filestore.py)."""
        fix = "the store holds a value of the wrong type; repair it or restore a backup"
        return decoded(self.uri, what, fn, fix)

    def _message(self, what: str, run: Any) -> dict[str, Any]:
        """A run as the REST API sends it (`Run.to_proto()`), for the one decoder."""
        from mlflow.utils.proto_json_utils import message_to_json

        data: dict[str, Any] = self._typed(
            what, lambda: json.loads(message_to_json(run.to_proto()))
        )
        return data

    def get_run(self, run_id: str) -> RunInfo:
        run = self._guard(f"run {run_id}", lambda: self.store.get_run(run_id))
        return _run_info(self._message(f"run {run_id}", run))

    def history_page(self, run_id: str, key: str, token: str | None) -> Page:
        page = self._guard(
            f"history of {key!r} in {run_id}",
            lambda: self.store.get_metric_history(
                run_id, key, max_results=PAGE_SIZE, page_token=token
            ),
        )
        points = self._typed(
            f"history of {key!r} in {run_id}",
            lambda: [Point(int(m.step), int(m.timestamp), number(m.value)) for m in page],
        )
        token_out = getattr(page, "token", None)
        return Page(points, token_out.decode() if isinstance(token_out, bytes) else token_out)

    def search_runs(self, experiment_ids: list[str], filter_string: str) -> list[RunInfo]:
        from mlflow.entities import ViewType

        runs: list[RunInfo] = []
        token = None
        while True:
            page = self._guard(
                "run search",
                lambda t=token: self.store.search_runs(
                    experiment_ids, filter_string, ViewType.ACTIVE_ONLY, 1000, None, t
                ),
            )
            runs.extend(_run_info(self._message(f"run {r.info.run_id}", r)) for r in page)
            token = page.token
            if not token:
                return runs

    def experiment_ids(self, names: list[str]) -> list[str]:
        return resolve_experiment_ids(names, self._experiment_id)

    def all_experiment_ids(self) -> list[str]:
        ids: list[str] = []
        token = None
        while True:
            page = self._guard(
                "experiment search", lambda t=token: self.store.search_experiments(page_token=t)
            )
            ids.extend(str(e.experiment_id) for e in page)
            token = page.token
            if not token:
                return ids

    def _experiment_id(self, name: str) -> str:
        exp = self._guard(f"experiment {name!r}", lambda: self.store.get_experiment_by_name(name))
        if exp is None:
            raise SourceNotFound(f"{self.uri}: experiment {name!r} not found")
        return str(exp.experiment_id)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._guard(
                f"tag run {run_id}", lambda k=key, v=value: self.client.set_tag(run_id, k, v)
            )

    def put_artifact(self, run: RunInfo, name: str, body: bytes) -> bool:
        self._guard(
            f"write {name} to run {run.run_id}",
            lambda: self.client.log_text(run.run_id, body.decode(), name),
        )
        return True

    def run_url(self, run: RunInfo) -> str | None:
        return None
