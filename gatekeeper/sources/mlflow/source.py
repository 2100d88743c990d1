"""`MlflowSource`: one MLflow run, read whole or polled for new points.

SOURCE forms: `mlflow+http(s)://HOST[:PORT][/PREFIX]/runs/RUN_ID` (a tracking server, REST),
`mlflow+file:///PATH/mlruns/runs/RUN_ID` and `mlflow+sqlite:///PATH/mlflow.db/runs/RUN_ID`
(local stores), `mlflow://RUN_ID` (the server in MLFLOW_TRACKING_URI). Databricks is not
supported. Params become the run config, user tags `KEY:VALUE` run tags, and the MLflow
status the run state (FAILED/KILLED cannot pass by default).

A poll asks for the run once (status, params, which metrics exist) and then for every
metric's history from the page its cursor stands in: a point logged at a step below the
metric's maximum (a run resumed with `MLFLOW_RUN_ID`) does not move the run's "latest"
value, so the latest value cannot tell that nothing is new. Requests are O(metrics + new
points / page), whatever the history's length. Each store keeps a history in an order of
its own (a file store: as appended; a SQL store, and so a server: by timestamp, step,
value), and a point can be logged into the middle of it (an older timestamp). The cursor
keeps the last point read, and each poll first checks it stands where it was: if not, the
new points cannot be told apart from the old by position, so that poll re-reads the run
whole (`Poll.reset`): one history read per metric, the same pages `check` reads.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gatekeeper.errors import UsageError, shown_url
from gatekeeper.extras import require
from gatekeeper.model import Run, Series, merge_chunks
from gatekeeper.sources.base import (
    LiveSource,
    Poll,
    StepTops,
    check_cursor_version,
    checked_url,
)
from gatekeeper.sources.mlflow.client import Point, RunInfo, TrackingClient, param_value
from gatekeeper.sources.mlflow.scheme import PREFIX, SCHEME, SCHEMES, names_a_run

STEP_KEY = "step"
_CURSOR_VERSION = 2  # 2: the last point read, not the run's latest
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
        raise UsageError(f"source {shown_url(spec)!r}: Databricks-hosted MLflow is not supported")
    if not run_id or "/" in run_id or not uri.startswith(_LOCAL + _REMOTE):
        raise UsageError(
            f"source {shown_url(spec)!r}: expected mlflow+http://HOST:PORT/runs/RUN_ID, "
            "mlflow+file:///PATH/mlruns/runs/RUN_ID or mlflow+sqlite:///PATH/mlflow.db/runs/RUN_ID"
        )
    return uri, run_id


def open_client(tracking_uri: str) -> TrackingClient:
    """The client of a server (REST over httpx) or of a local store (mlflow's own store
    classes), each asking for what it imports from `gatekeeper[mlflow]`."""
    if tracking_uri.startswith(_REMOTE):
        checked_url(tracking_uri, "MLflow tracking")
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


class _Shifted(Exception):
    """A point was logged into the middle of a history already read (an older timestamp
    in a store that orders by timestamp): positions no longer tell new points from old."""


def _mark(point: Point) -> list[Any]:
    """A point as the cursor keeps it (JSON: NaN as text, and NaN never equals NaN)."""
    return [point.step, point.timestamp, repr(point.value)]


def _series(key: str, points: list[Point]) -> Series:
    steps = np.fromiter((p.step for p in points), np.int64, len(points))
    values = np.fromiter((p.value for p in points), np.float64, len(points))
    return merge_chunks(key, [(steps, values)], STEP_KEY)


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
        self._reread = False  # the next poll holds the whole run again (Poll.reset)
        self._tops = StepTops()

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
        try:
            series = self._new_series(info)
            reset, self._reread = self._reread, False
            if self._tops.below(series):  # a resumed run below its old maximum: check
                raise _Shifted("a point below one delivered")  # sorts it among them
        except _Shifted:
            self.rewind()  # re-read whole
            series, reset = self._new_series(info), True
        self._tops.note(series)
        run = self._run(info)
        points_read = sum(len(s) for s in series.values())
        return Poll(
            series=series, run=run, ended=not run.state.is_live, points=points_read, reset=reset
        )

    def rewind(self) -> bool:
        self._cursors, self._tops = {}, StepTops()
        return True

    def cursor(self) -> dict[str, Any]:
        return {"version": _CURSOR_VERSION, "metrics": self._cursors,
                "tops": self._tops.to_json()}

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a saved cursor. An older layout (version 1 kept each metric's
        latest point, which misses a point logged below it) is not refused: the next poll
        re-reads the run whole as a reset, so a daemon's saved runs survive the upgrade."""
        version = cursor.get("version")
        if isinstance(version, int) and 1 <= version < _CURSOR_VERSION:
            self._cursors, self._reread = {}, True
            return
        check_cursor_version(cursor, _CURSOR_VERSION, self.shown)
        self._cursors = {k: dict(v) for k, v in cursor.get("metrics", {}).items()}
        self._tops = StepTops(cursor.get("tops"))

    # -- internals ----------------------------------------------------------------------

    def _new_series(self, info: RunInfo) -> dict[str, Series]:
        """Each metric's points after the cursor (every metric asked, the empty left out)."""
        chunks = {key: self._new_points(key) for key in sorted(info.latest)}
        return {key: _series(key, points) for key, points in chunks.items() if points}

    def _new_points(self, key: str) -> list[Point]:
        """The points of `key` after the cursor: its history from the page the cursor
        stands in, once the last point read is found where it was left (else `_Shifted`)."""
        cur = self._cursors.setdefault(key, {"token": None, "seen": 0, "last": None})
        token, seen = cur["token"], int(cur["seen"])
        page = self.client.history_page(self.run_id, key, token)
        if seen and (len(page.points) < seen or _mark(page.points[seen - 1]) != cur["last"]):
            raise _Shifted(key)
        out = page.points[seen:]
        while page.next_token:
            token = page.next_token
            page = self.client.history_page(self.run_id, key, token)
            out.extend(page.points)
        if page.points:  # a page after a token is never empty: the cursor keeps a point
            cur.update(token=token, seen=len(page.points), last=_mark(page.points[-1]))
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
