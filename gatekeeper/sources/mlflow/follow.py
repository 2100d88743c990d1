"""`NewRunSource`: follow the MLflow run created after the watch began.

`gatekeeper run --source mlflow+file:///PATH/mlruns -- CMD` (or `mlflow+sqlite:///PATH/db`,
`mlflow+http://HOST:PORT`, `mlflow://` for MLFLOW_TRACKING_URI, or a plain `mlruns/`
folder): the run's id does not exist until CMD creates the run, so the SOURCE names the
store, not the run. As for a wandb folder, the runs in the store when the watch opens are
noted and never followed (a reused store holds finished runs); each poll lists the store's
runs, in every experiment, until one that was not there appears, then follows it as an
`MlflowSource` and says which. Several new runs at once: the one started first (the others
are named). A local store is not opened until it holds a run (a read-only look at the
files): mlflow's file and SQL stores create themselves, migrations and all, when opened,
and CMD may be doing just that.
"""

from __future__ import annotations

import glob
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any
from urllib.parse import quote, urlsplit

from gatekeeper.errors import UsageError
from gatekeeper.model import Run
from gatekeeper.sources.base import LiveSource, Poll, check_cursor_version
from gatekeeper.sources.mlflow.client import RunInfo, TrackingClient
from gatekeeper.sources.mlflow.scheme import PREFIX, SCHEME, SCHEMES, names_a_run
from gatekeeper.sources.mlflow.source import MlflowSource, open_client, public_uri, source_for

_CURSOR_VERSION = 1
_STORES = ("file:", "sqlite:", "http://", "https://")


def store_uri(spec: str) -> str:
    """The tracking URI of a SOURCE that names a store and no run."""
    if spec.startswith(SCHEME):
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise UsageError(f"source {spec!r}: set MLFLOW_TRACKING_URI, or name the store")
    else:
        uri = spec[len(PREFIX) :].rstrip("/")
    if not uri.startswith(_STORES):
        raise UsageError(
            f"source {spec!r}: expected mlflow+file:///PATH/mlruns, mlflow+sqlite:///PATH/"
            "mlflow.db or mlflow+http://HOST:PORT (the run created after the watch began), "
            "or one run: .../runs/RUN_ID"
        )
    return uri


def local_path(uri: str) -> str | None:
    """The file or folder of a local store (`file:///x`, `sqlite:////x.db`), else None."""
    if uri.startswith("file:"):
        return urlsplit(uri).path or None
    if uri.startswith("sqlite:"):
        return urlsplit(uri).path[1:] or None  # sqlite:///rel.db, sqlite:////abs.db
    return None


def _holds_a_run(path: str, *, sqlite: bool) -> bool:
    """A local store CMD may be creating holds a run: only then is it opened. Opening it
    earlier would race CMD's mlflow creating it (the SQL store runs its schema migrations
    on open). A read-only look, never a write: a run's `meta.yaml` in a file store, a row
    in a sqlite store's `runs` table."""
    if not sqlite:
        return bool(glob.glob(os.path.join(glob.escape(path), "*", "*", "meta.yaml")))
    if not os.path.isfile(path):
        return False
    try:
        with closing(sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)) as db:
            return db.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.Error:  # no `runs` table yet, or the file is locked mid-migration
        return False


class NewRunSource(LiveSource):
    """The first MLflow run started in a store after the watch began, followed live."""

    kind = (
        "mlflow+file:///PATH/mlruns, mlflow+sqlite:///PATH/mlflow.db or mlflow+http://HOST:PORT "
        "(live: the run created after the watch began)"
    )
    example = "mlflow+file:///work/mlruns"

    def __init__(self, spec: str, say: Callable[[str], None] | None = None):
        super().__init__(spec)
        self.tracking_uri = store_uri(spec)
        self.shown = PREFIX + public_uri(self.tracking_uri)
        self.say = say or (lambda text: None)
        self._client: TrackingClient | None = None
        self.inner: MlflowSource | None = None
        self.runs_before = frozenset(r.run_id for r in self._runs())
        self._waiting_said = False

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.startswith(SCHEMES) and not names_a_run(spec)

    @property
    def client(self) -> TrackingClient:
        if self._client is None:
            self._client = open_client(self.tracking_uri)
        return self._client

    @property
    def followed(self) -> str | None:
        """The SOURCE of the run followed (for reports that read it whole), once found."""
        return self.inner.spec if self.inner is not None else None

    def poll(self) -> Poll:
        if self.inner is None:
            self.inner = self._find()
        if self.inner is None:
            self._waiting()
            return Poll(series={}, run=Run(name=self.shown, source=self.shown), ended=False)
        return self.inner.poll()

    def read(self) -> Run:
        if self.inner is None:
            raise UsageError(
                f"{self.shown} names a store, not a run: name one, "
                f"{self.shown}/runs/RUN_ID (or follow the next run with watch/run)"
            )
        return self.inner.read()

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "runs_before": sorted(self.runs_before),
            "run_id": self.inner.run_id if self.inner else None,
            "inner": self.inner.cursor() if self.inner else None,
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        check_cursor_version(cursor, _CURSOR_VERSION, self.shown)
        self.runs_before = frozenset(cursor.get("runs_before", ()))
        if cursor.get("run_id"):
            self.inner = self._source(str(cursor["run_id"]))
            self.inner.restore(cursor["inner"])

    # -- internals ----------------------------------------------------------------------

    def _runs(self) -> list[RunInfo]:
        """Every run of the store now; none while a local store holds no run yet."""
        path = local_path(self.tracking_uri)
        sqlite = self.tracking_uri.startswith("sqlite:")
        if path is not None and not _holds_a_run(path, sqlite=sqlite):
            return []
        return self.client.search_runs(self.client.all_experiment_ids(), "")

    def _find(self) -> MlflowSource | None:
        fresh = [r for r in self._runs() if r.run_id not in self.runs_before]
        if not fresh:
            return None
        first, *others = sorted(fresh, key=lambda r: (r.start_time, r.run_id))
        source = self._source(first.run_id)
        rest = f"; not followed, also new: {', '.join(r.run_id for r in others)}" if others else ""
        self.say(
            f"gatekeeper: following mlflow run {first.name} (created after the watch began, "
            f"experiment {first.experiment_id}): {source.shown}{rest}"
        )
        return source

    def _source(self, run_id: str) -> MlflowSource:
        return MlflowSource(source_for(self.tracking_uri, run_id), client=self.client)

    def _waiting(self) -> None:
        """Say once why the runs already in the store are not followed, and how to attach."""
        if self._waiting_said:
            return
        self._waiting_said = True
        earlier = (
            f"{len(self.runs_before)} earlier run(s) there are not followed; to follow one, "
            f"pass {self.shown}/runs/RUN_ID"
            if self.runs_before
            else "none there yet"
        )
        self.say(f"gatekeeper: waiting for a new mlflow run in {self.shown} ({earlier})")
