"""`NewRunSource`: follow the MLflow run created after the watch began.

`gatekeeper run --source mlflow+file:///PATH/mlruns -- CMD` (or `mlflow+sqlite:///PATH/db`,
`mlflow+http://HOST:PORT`, `mlflow://` for MLFLOW_TRACKING_URI, or a plain `mlruns/`
folder): the run's id does not exist until CMD creates the run, so the SOURCE names the
store, not the run. As for a wandb folder, the runs in the store when the watch opens are
noted and never followed (a reused store holds finished runs); each poll lists the store's
runs, in every experiment, until one that was not there appears, then follows it as an
`MlflowSource` and says which. Several new runs at once: the one started first (the others
are named). A local store is not opened until it holds a run (a look at the files that
creates nothing): mlflow's file and SQL stores create themselves, migrations and all, when
opened, and CMD may be doing just that. A store that cannot be read as the watch begins
(locked past a wait, not a database, or left by a writer killed mid-transaction where
gatekeeper may not write it, so cannot roll it back) is an error, never taken for an
empty one.
"""

from __future__ import annotations

import glob
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any
from urllib.parse import quote

from gatekeeper.errors import SourceError, UsageError, shown_url
from gatekeeper.model import Run
from gatekeeper.sources.base import LiveSource, Poll, check_cursor_version
from gatekeeper.sources.mlflow.client import RunInfo, TrackingClient
from gatekeeper.sources.mlflow.scheme import PREFIX, SCHEME, SCHEMES, names_a_run
from gatekeeper.sources.mlflow.source import MlflowSource, open_client, public_uri, source_for
from gatekeeper.sources.mlflow.store import local_path

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
            f"source {shown_url(spec)!r}: expected mlflow+file:///PATH/mlruns, mlflow+sqlite:///PATH/"
            "mlflow.db or mlflow+http://HOST:PORT (the run created after the watch began), "
            "or one run: .../runs/RUN_ID"
        )
    return uri


# How long a look at a sqlite store waits for a writer's lock (SQLite's busy timeout):
# mlflow holds one for a transaction, its schema migrations for a few seconds each. As
# the watch begins (what is there already must be known) and on a poll (looked at again
# on the next).
LOCK_WAIT_START, LOCK_WAIT_POLL = 10.0, 1.0


def _holds_a_run(path: str, *, sqlite: bool, wait: float = LOCK_WAIT_POLL) -> bool:
    """A local store CMD may be creating holds a run: only then is it opened. Opening it
    earlier would race CMD's mlflow creating it (the SQL store runs its schema migrations
    on open). A look that creates nothing: a run's `meta.yaml` in a file store, a row in
    a sqlite store's `runs` table. `_Unreadable`: a sqlite store that cannot be read now
    (locked past `wait` seconds, not a database), which is not one that holds no run."""
    if not sqlite:
        return bool(glob.glob(os.path.join(glob.escape(path), "*", "*", "meta.yaml")))
    if not os.path.isfile(path):
        return False
    try:
        with closing(sqlite3.connect(_no_create(path), uri=True, timeout=wait)) as db:
            return db.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.OperationalError as exc:
        if str(exc).startswith("no such table"):
            return False  # CMD's mlflow is creating the store
        raise _Unreadable(str(exc)) from None
    except sqlite3.Error as exc:  # not a database, corrupt
        raise _Unreadable(str(exc)) from None


def _no_create(path: str) -> str:
    """The URI that opens a sqlite file without creating it: read-write where this
    process may write it, so that a journal left by a writer killed inside a transaction
    is rolled back, as SQLite does before anyone reads such a file (read-only, that read
    fails: "attempt to write a readonly database"); read-only where it may not."""
    folder = os.path.dirname(path) or "."
    mode = "rw" if os.access(path, os.W_OK) and os.access(folder, os.W_OK) else "ro"
    return f"file:{quote(path)}?mode={mode}"


class _Unreadable(Exception):
    """A sqlite store that cannot be read now (why)."""


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
        self.runs_before = frozenset(r.run_id for r in self._runs_before())
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

    def rewind(self) -> bool:
        return self.inner is None or self.inner.rewind()  # no run yet: nothing read

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

    def _runs_before(self) -> list[RunInfo]:
        """The runs in the store as the watch begins. A store that cannot be read then is
        an error, never taken for an empty one: its runs would all look new, and the
        first of them (one that ended long ago) would be followed and judged."""
        try:
            return self._runs(wait=LOCK_WAIT_START)
        except _Unreadable as exc:
            raise SourceError(
                f"{local_path(self.tracking_uri)}: cannot tell which runs the MLflow store "
                f"holds already: {exc}; retry once its writer is done, or name the run: "
                f"{self.shown}/runs/RUN_ID"
            ) from None

    def _runs(self, wait: float = LOCK_WAIT_POLL) -> list[RunInfo]:
        """Every run of the store now; none while a local store holds no run yet.
        `_Unreadable` where a sqlite store cannot be read now."""
        path = local_path(self.tracking_uri)
        sqlite = self.tracking_uri.startswith("sqlite:")
        if path is not None and not _holds_a_run(path, sqlite=sqlite, wait=wait):
            return []
        return self.client.search_runs(self.client.all_experiment_ids(), "")

    def _find(self) -> MlflowSource | None:
        try:
            runs = self._runs()
        except _Unreadable:  # locked by CMD's mlflow for now: looked at again next poll
            return None
        fresh = [r for r in runs if r.run_id not in self.runs_before]
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
