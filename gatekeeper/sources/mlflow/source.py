"""`MlflowSource`: one MLflow run, read whole or polled for new points.

SOURCE forms: `mlflow+http(s)://HOST[:PORT][/PREFIX]/runs/RUN_ID` (a tracking server, REST),
`mlflow+file:///PATH/mlruns/runs/RUN_ID` and `mlflow+sqlite:///PATH/mlflow.db/runs/RUN_ID`
(local stores), `mlflow://RUN_ID` (the server in MLFLOW_TRACKING_URI). Databricks is not
supported. Params become the run config, user tags `KEY:VALUE` run tags, and the MLflow
status the run state (FAILED/KILLED cannot pass by default).

A poll asks for the run once (status, params, each metric's latest point) and then only for
the metrics whose latest point moved, resuming each history at the server's own page token:
requests are O(changed metrics + new points / page), whatever the history's length. The
history is ordered by timestamp: a point logged later with an older timestamp shifts it, and
a poll that sees this raises instead of guessing which points are new.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gatekeeper.errors import SourceError, UsageError
from gatekeeper.extras import require
from gatekeeper.model import Run, Series, merge_chunks
from gatekeeper.sources.base import LiveSource, Poll, check_cursor_version
from gatekeeper.sources.mlflow.client import Point, RunInfo, TrackingClient, param_value
from gatekeeper.sources.mlflow.scheme import PREFIX, SCHEME, SCHEMES, names_a_run

STEP_KEY = "step"
_CURSOR_VERSION = 1
_LOCAL = ("file:", "sqlite:")
_REMOTE = ("http://", "https://")


def parse_spec(spec: str) -> tuple[str, str]:
    """(tracking URI, run id) of a SOURCE string."""
    if spec.startswith(SCHEME):
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        run_id = spec[len(SCHEME) :].strip("/")
        if not uri:
            raise UsageError(
                f"source {spec!r}: set MLFLOW_TRACKING_URI, or name the server in the source: "
                "mlflow+http://127.0.0.1:5000/runs/RUN_ID"
            )
    else:
        uri, sep, run_id = spec[len(PREFIX) :].rpartition("/runs/")
        if not sep:
            uri, run_id = "", ""
    if uri.startswith("databricks"):
        raise UsageError(f"source {spec!r}: Databricks-hosted MLflow is not supported")
    if not run_id or "/" in run_id or not uri.startswith(_LOCAL + _REMOTE):
        raise UsageError(
            f"source {spec!r}: expected mlflow+http://HOST:PORT/runs/RUN_ID, "
            "mlflow+file:///PATH/mlruns/runs/RUN_ID or mlflow+sqlite:///PATH/mlflow.db/runs/RUN_ID"
        )
    return uri, run_id


def open_client(tracking_uri: str) -> TrackingClient:
    """The client of a server (REST over httpx) or of a local store (mlflow's own store
    classes), each asking for what it imports from `gatekeeper[mlflow]`."""
    if tracking_uri.startswith(_REMOTE):
        require("mlflow", "reading an MLflow tracking server", ("httpx",))
        from gatekeeper.sources.mlflow.rest import RestClient

        return RestClient(tracking_uri)
    sql = ("sqlalchemy", "alembic") if not tracking_uri.startswith("file:") else ()
    require("mlflow", "reading a local MLflow store", ("mlflow", *sql))
    from gatekeeper.sources.mlflow.store import StoreClient

    return StoreClient(tracking_uri)


def public_uri(uri: str) -> str:
    """The URI without a `user:password@` part."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


def source_for(tracking_uri: str, run_id: str) -> str:
    return f"{PREFIX}{tracking_uri.rstrip('/')}/runs/{run_id}"


class MlflowSource(LiveSource):
    """An MLflow run: metric histories on their steps, params, tags and status."""

    kind = "mlflow+http://HOST:PORT/runs/RUN_ID (or mlflow+file:// / mlflow+sqlite://)"
    example = "mlflow+http://127.0.0.1:5000/runs/0d7c5e0a9f1e4b6c8a2b3c4d5e6f7a8b"

    def __init__(self, spec: str, client: TrackingClient | None = None):
        super().__init__(spec)
        self.tracking_uri, self.run_id = parse_spec(spec)
        # what messages and reports show: never a user:password@ from the URI
        self.shown = source_for(public_uri(self.tracking_uri), self.run_id)
        self._client = client
        self._cursors: dict[str, dict[str, Any]] = {}

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.startswith(SCHEMES) and names_a_run(spec)  # a store alone: follow.py

    @property
    def client(self) -> TrackingClient:
        if self._client is None:
            self._client = open_client(self.tracking_uri)
        return self._client

    # -- Source / LiveSource ------------------------------------------------------------

    def read(self) -> Run:
        self._cursors = {}
        poll = self.poll()
        poll.run.series = poll.series
        return poll.run

    def poll(self) -> Poll:
        return self.poll_info(self.client.get_run(self.run_id))

    def poll_info(self, info: RunInfo) -> Poll:
        """A poll from the run as already fetched (one run search serves many runs)."""
        series: dict[str, Series] = {}
        for key in sorted(info.latest):
            points = self._new_points(key, info.latest[key])
            if points:
                series[key] = merge_chunks(
                    key,
                    [(
                        np.fromiter((p.step for p in points), np.int64, len(points)),
                        np.fromiter((p.value for p in points), np.float64, len(points)),
                    )],
                    STEP_KEY,
                )
        run = self._run(info)
        points_read = sum(len(s) for s in series.values())
        return Poll(series=series, run=run, ended=not run.state.is_live, points=points_read)

    def cursor(self) -> dict[str, Any]:
        return {"version": _CURSOR_VERSION, "metrics": self._cursors}

    def restore(self, cursor: dict[str, Any]) -> None:
        check_cursor_version(cursor, _CURSOR_VERSION, self.shown)
        self._cursors = {k: dict(v) for k, v in cursor.get("metrics", {}).items()}

    # -- internals ----------------------------------------------------------------------

    def _new_points(self, key: str, latest: Point) -> list[Point]:
        """The points of `key` after the cursor: nothing asked when its latest point is the
        one seen last time, else its history from the last page the cursor stands in."""
        cur = self._cursors.setdefault(key, {"token": None, "seen": 0, "latest": None})
        mark = [latest.step, latest.timestamp]
        if cur["latest"] == mark:
            return []
        out: list[Point] = []
        token, seen = cur["token"], int(cur["seen"])
        while True:
            page = self.client.history_page(self.run_id, key, token)
            if seen > len(page.points):
                raise SourceError(
                    f"{self.shown}: metric {key!r} lost points already read (page holds "
                    f"{len(page.points)}, {seen} were read); was the run rewritten?"
                )
            out.extend(page.points[seen:])
            if page.next_token:
                token, seen = page.next_token, 0
                continue
            if not any(p.step == latest.step and p.timestamp == latest.timestamp for p in out):
                # the latest point moved, so it is new and must be in the tail just read;
                # if not, a point was logged with an older timestamp and shifted the order
                raise SourceError(
                    f"{self.shown}: metric {key!r}: a point was logged with a timestamp older "
                    f"than points already read (latest is step {latest.step}); MLflow orders "
                    "a history by timestamp, so the new points cannot be told apart: "
                    "judge the run whole with `gatekeeper check`"
                )
            cur.update(token=token, seen=len(page.points), latest=mark)
            return out

    def _run(self, info: RunInfo) -> Run:
        tags = tuple(
            k if v in ("", "true") else f"{k}:{v}"
            for k, v in sorted(info.tags.items())
            if not k.startswith("mlflow.")
        )
        return Run(
            name=info.name,
            source=self.shown,
            tags=tags,
            config={k: param_value(v) for k, v in info.params.items()},
            state=info.state,
            # MLflow records how a run ends: a RUNNING run judged as final is incomplete
            carries_state=True,
            url=self.client.run_url(info),
            run_id=info.run_id or self.run_id,
        )
