"""`WandbLocalSource`: a wandb run directory on disk, read from its `.wandb` transaction log.

Accepts `wandb/offline-run-*/`, `wandb/run-*/`, a `run-*.wandb` file, and a `wandb/`
folder (or the directory holding one), which means its `latest-run`. That is resolved
once — when the source opens, or at the first poll that finds it (a watch may start
before training does) — so a watch keeps following the same run. Polls read only the
records appended since the last poll. A run without an exit record (still running, or
its writer was killed) is `running`; the exit code decides `finished` or `failed`.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from gatekeeper.errors import RecordError, SourceError, SourceNotFound
from gatekeeper.model import Run, RunState, Series
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.sources.wandb_axes import Columns, StepAxes
from gatekeeper.sources.wandb_decode import decode
from gatekeeper.sources.wandb_log import LogReader

_CURSOR_VERSION = 1
_RUN_DIR_PREFIXES = ("run-", "offline-run-")


def resolve_run_dir(path: str) -> str | None:
    """The run directory `path` names (following `latest-run`), or None if it names none."""
    if path.endswith(".wandb"):
        return os.path.dirname(os.path.abspath(path))
    for candidate in (path, os.path.join(path, "wandb")):
        latest = os.path.join(candidate, "latest-run")
        if os.path.isdir(latest):
            return os.path.realpath(latest)
    if glob.glob(os.path.join(path, "*.wandb")) or _is_wandb_run_name(path):
        return os.path.abspath(path)
    return None


def _is_wandb_run_name(path: str) -> bool:
    """`wandb/run-*` or `wandb/offline-run-*`: named as the SDK names run directories."""
    norm = os.path.normpath(os.path.abspath(path))
    parent, base = os.path.split(norm)
    return os.path.basename(parent) == "wandb" and base.startswith(_RUN_DIR_PREFIXES)


class WandbLocalSource(LiveSource):
    """A local wandb run (offline or synced), tailed through its transaction log."""

    kind = "wandb run directory"

    def __init__(self, spec: str):
        super().__init__(spec)
        path = spec[len("file://") :] if spec.startswith("file://") else spec
        self.path = path
        self.log_file = path if path.endswith(".wandb") else None
        # None until the run exists: a watch may start before training does
        self.run_dir: str | None = resolve_run_dir(path)
        self._reader: LogReader | None = None
        self._axes = StepAxes()
        self._carry: dict[str, float] = {}
        self._meta: dict[str, Any] = {"config": {}, "tags": []}
        self._state = RunState.RUNNING

    @classmethod
    def accepts(cls, spec: str) -> bool:
        if "://" in spec and not spec.startswith("file://"):
            return False
        path = spec.removeprefix("file://")
        if path.endswith(".wandb") or _is_wandb_run_name(path):
            return True
        if os.path.isdir(path):
            return resolve_run_dir(path) is not None
        # a `wandb/` folder that does not exist yet: a watch started before training
        return not os.path.exists(path) and os.path.basename(os.path.normpath(path)) == "wandb"

    # -- LiveSource ---------------------------------------------------------------------

    def poll(self) -> Poll:
        reader = self._open_reader()
        if reader is None:
            return Poll(series={}, run=self._run({}), ended=False)
        series = self._decode(reader)
        points = sum(len(s) for s in series.values())
        ended = not self._state.is_live
        return Poll(series=series, run=self._run({}), ended=ended, points=points)

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "file": self._reader.path if self._reader else None,
            "offset": self._reader.offset if self._reader else 0,
            "axes": self._axes.to_json(),
            "carry": dict(self._carry),
            "meta": self._meta,
            "state": self._state.value,
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        if cursor.get("version") != _CURSOR_VERSION:
            raise RecordError(
                f"cursor version {cursor.get('version')!r} is not {_CURSOR_VERSION}; "
                "drop the saved position to re-read the run",
                file=self.run_dir or self.path,
            )
        if cursor.get("file"):
            self._reader = LogReader(cursor["file"], int(cursor.get("offset", 0)))
        self._axes = StepAxes.from_json(cursor.get("axes", {}))
        self._carry = {k: float(v) for k, v in cursor.get("carry", {}).items()}
        self._meta = dict(cursor.get("meta", {"config": {}, "tags": []}))
        self._state = RunState(cursor.get("state", RunState.RUNNING.value))

    # -- Source -------------------------------------------------------------------------

    def read(self) -> Run:
        reader = self._open_reader()
        if reader is None:
            where = self.run_dir or self.path
            raise SourceNotFound(
                f"{where}: not a wandb run (no run-*.wandb transaction log, no latest-run)"
            )
        return self._run(self._decode(reader))

    # -- internals ----------------------------------------------------------------------

    def _open_reader(self) -> LogReader | None:
        if self._reader is None:
            if self.run_dir is None:
                self.run_dir = resolve_run_dir(self.path)
                if self.run_dir is None:
                    return None  # the run has not started yet
            path = self.log_file or _find_log(self.run_dir)
            if path is None or not os.path.exists(path):
                return None  # the writer has not created it yet
            self._reader = LogReader(path)
        return self._reader

    def _decode(self, reader: LogReader) -> dict[str, Series]:
        """Read every new complete record; history goes to columns, the rest to metadata."""
        part = decode(reader.path, reader.offset)
        reader.offset, reader.pending_bytes = part.end, part.pending
        for rec in part.meta:
            self._apply(rec.WhichOneof("record_type"), rec)
        cols = Columns(self._carry)
        cols.steps = part.steps
        for key, (rows, values, mask) in part.keys.items():
            cols.rows[key] = rows
            cols.vals[key] = (values, mask)
        try:
            return dict(sorted(cols.finish(self._axes).items()))
        except SourceError as exc:
            raise RecordError(str(exc), file=reader.path) from None

    def _apply(self, kind: str, rec: Any) -> None:
        if kind == "metric":
            m = rec.metric
            self._axes.define(m.name, m.glob_name, m.step_metric)
        elif kind == "run":
            self._apply_run(rec.run)
        elif kind == "config":
            _update_config(self._meta["config"], rec.config)
        elif kind == "exit":
            self._state = RunState.FINISHED if rec.exit.exit_code == 0 else RunState.FAILED

    def _apply_run(self, r: Any) -> None:
        meta = self._meta
        meta["id"] = r.run_id or meta.get("id")
        meta["name"] = r.display_name or meta.get("name") or r.run_id
        meta["entity"] = r.entity or meta.get("entity")
        meta["project"] = r.project or meta.get("project")
        meta["tags"] = list(r.tags) or meta.get("tags", [])
        if r.HasField("config"):
            _update_config(meta["config"], r.config)

    def _run(self, series: dict[str, Series]) -> Run:
        meta = self._meta
        where = self.run_dir or self.path
        return Run(
            name=meta.get("name") or os.path.basename(os.path.normpath(where)),
            source=where,
            tags=tuple(meta.get("tags", ())),
            config=dict(meta.get("config", {})),
            state=self._state,
            run_id=meta.get("id"),
            series=series,
        )


def _update_config(config: dict[str, Any], rec: Any) -> None:
    for item in rec.update:
        keys = list(item.nested_key) or [item.key]
        if keys[0] == "_wandb":
            continue
        try:
            value = json.loads(item.value_json)
        except (ValueError, RecursionError):
            value = item.value_json  # not JSON (or absurdly deep): kept as the text
        cur = config
        for k in keys[:-1]:
            nxt = cur.get(k)
            if not isinstance(nxt, dict):
                # a key set under what was a scalar: the later, nested value wins (as a
                # wandb config update of a nested dict replaces a scalar)
                nxt = cur[k] = {}
            cur = nxt
        cur[keys[-1]] = value
    for item in rec.remove:
        keys = list(item.nested_key) or [item.key]
        node: Any = config
        for k in keys[:-1]:
            node = node.get(k, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(keys[-1], None)


def _find_log(run_dir: str) -> str | None:
    found = sorted(glob.glob(os.path.join(run_dir, "*.wandb")), key=os.path.getmtime)
    return found[-1] if found else None


__all__ = ["WandbLocalSource", "resolve_run_dir"]
