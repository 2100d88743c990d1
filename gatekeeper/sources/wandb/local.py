"""`WandbLocalSource`: a wandb run directory on disk, read from its `.wandb` transaction log.

Accepts `wandb/offline-run-*/`, `wandb/run-*/`, a `run-*.wandb` file, and a `wandb/`
folder (or the directory holding one), which means its `latest-run`. That is resolved
once — when the source opens, or at the first poll that finds it (a watch may start
before training does) — so a watch keeps following the same run. A resumed run's
earlier segments are read first, then the named one (segments.py says where each
segment's `_step`s go); `check` and a live watch read them alike. Polls read only the
records appended since the last poll. A run without an exit record (still running, or
its writer was killed) is `running`; the exit code decides `finished` or `failed`.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from gatekeeper.errors import RecordError, SourceError, SourceNotFound
from gatekeeper.extras import require
from gatekeeper.model import Run, RunState, Series, merge_chunks
from gatekeeper.sources.base import LiveSource, Poll, StepTops
from gatekeeper.sources.wandb.axes import Columns, StepAxes
from gatekeeper.sources.wandb.log import LogReader
from gatekeeper.sources.wandb.segments import (
    RUN_DIR_PREFIXES,
    StepJoin,
    earlier_segments,
    find_log,
)

_CURSOR_VERSION = 2  # 2: the segments of a resumed run and where their `_step`s go


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


def wandb_folders(path: str) -> list[str]:
    """Where a wandb folder `path` names holds its run directories: itself, `path/wandb`."""
    return [path, os.path.join(path, "wandb")]


def run_dirs(path: str, *, strict: bool = False) -> set[str]:
    """The real paths of every run directory in the wandb folder `path` names. `strict`:
    a folder there that cannot be listed raises its OSError (glob would find nothing in
    it, and the runs there before a watch began would be taken for new ones)."""
    found: set[str] = set()
    for folder in wandb_folders(path):
        if strict:
            try:
                os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
        for prefix in RUN_DIR_PREFIXES:
            found.update(os.path.realpath(d) for d in glob.glob(os.path.join(folder, prefix + "*")))
    return {d for d in found if os.path.isdir(d)}


def names_one_run(path: str) -> bool:
    """True when `path` names one run (a `.wandb` file or a run directory), not a folder."""
    return path.endswith(".wandb") or _is_wandb_run_name(path) or bool(
        glob.glob(os.path.join(path, "*.wandb"))
    )


def new_run_dir(path: str, existing: frozenset[str]) -> str | None:
    """The newest run directory in the wandb folder `path` that is not in `existing`
    (the runs there before a watch began): `latest-run` when it points to one."""
    for folder in wandb_folders(path):
        latest = os.path.join(folder, "latest-run")
        if os.path.isdir(latest) and os.path.realpath(latest) not in existing:
            return os.path.realpath(latest)
    fresh = sorted(run_dirs(path) - existing, key=lambda d: (os.path.getmtime(d), d))
    return fresh[-1] if fresh else None


def _is_wandb_run_name(path: str) -> bool:
    """`wandb/run-*` or `wandb/offline-run-*`: named as the SDK names run directories."""
    norm = os.path.normpath(os.path.abspath(path))
    parent, base = os.path.split(norm)
    return os.path.basename(parent) == "wandb" and base.startswith(RUN_DIR_PREFIXES)


class WandbLocalSource(LiveSource):
    """A local wandb run (offline or synced), tailed through its transaction log."""

    kind = "wandb run directory"

    def __init__(self, spec: str, *, runs_before: frozenset[str] | None = None):
        """`runs_before` (a live watch of a wandb folder): the run directories that existed
        when the watch began. The source then follows only a run started after that, never
        `latest-run` of an earlier one (a reused WANDB_DIR holds finished runs)."""
        require("wandb", "reading a wandb run directory")
        super().__init__(spec)
        path = spec[len("file://") :] if spec.startswith("file://") else spec
        self.path = path
        self.log_file = path if path.endswith(".wandb") else None
        self.runs_before = None if names_one_run(path) else runs_before
        # None until the run exists: a watch may start before training does
        self.run_dir: str | None = self._resolve()
        self._logs: list[str] = []  # the run's segments' `.wandb` logs, oldest first
        self._reader: LogReader | None = None
        self._from_the_start()

    def _from_the_start(self) -> None:
        """What is read so far: nothing (a new source, or one that reads the run again)."""
        self._segment = 0  # the index in `_logs` of the one `_reader` reads
        self._join = StepJoin()
        self._axes = StepAxes()
        self._carry: dict[str, float] = {}
        self._meta: dict[str, Any] = {"config": {}, "tags": []}
        self._state = RunState.RUNNING
        self._forms: dict[str, bool] = {}  # metric name -> logged as a nested key
        # a point below a step delivered (a `define_metric` step going back): read again
        self._tops = StepTops()

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
        if self._open_reader() is None:
            return Poll(series={}, run=self._run({}), ended=False)
        series, reset = self._read_new(), False
        if self._tops.below(series):  # `check` sorts such points among the earlier ones
            self._forget()
            series, reset = self._read_new(), True
        self._tops.note(series)
        points = sum(len(s) for s in series.values())
        ended = not self._state.is_live
        return Poll(series=series, run=self._run({}), ended=ended, points=points, reset=reset)

    def rewind(self) -> bool:
        if self._reader is not None:  # else nothing read yet
            self._forget()
        return True

    def _forget(self) -> None:
        """Back to the start of the run's first segment, as a whole read begins."""
        self._from_the_start()
        self._reader = LogReader(self._logs[0])
        self._count_segments()

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "logs": list(self._logs),
            "segment": self._segment,
            "offset": self._reader.offset if self._reader else 0,
            "join": self._join.to_json(),
            "axes": self._axes.to_json(),
            "carry": dict(self._carry),
            "meta": self._meta,
            "state": self._state.value,
            "tops": self._tops.to_json(),
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        if cursor.get("version") == 1:  # saved before segments were read live: one file,
            # its `_step`s as logged (version 1 never moved them), so it goes on as it was
            logs = [cursor["file"]] if cursor.get("file") else []
            cursor = {**cursor, "version": 2, "logs": logs, "join": {"shift": 0.0}}
        if cursor.get("version") != _CURSOR_VERSION:
            raise RecordError(
                f"cursor version {cursor.get('version')!r} is not {_CURSOR_VERSION}; "
                "drop the saved position to re-read the run",
                file=self.run_dir or self.path,
            )
        if cursor.get("logs"):
            self._logs = [str(log) for log in cursor["logs"]]
            self._segment = int(cursor.get("segment", 0))
            self._reader = LogReader(self._logs[self._segment], int(cursor.get("offset", 0)))
            self.run_dir = os.path.dirname(os.path.abspath(self._logs[-1]))
        self._join = StepJoin.from_json(cursor.get("join", {}))
        self._axes = StepAxes.from_json(cursor.get("axes", {}))
        self._carry = {k: float(v) for k, v in cursor.get("carry", {}).items()}
        self._meta = dict(cursor.get("meta", {"config": {}, "tags": []}))
        self._state = RunState(cursor.get("state", RunState.RUNNING.value))
        self._tops = StepTops(cursor.get("tops"))

    @property
    def log_path(self) -> str | None:
        """The `.wandb` file of the run (its last segment), once the run has created it."""
        return self._logs[-1] if self._logs else None

    @property
    def segments(self) -> int:
        """How many segments of a resumed run are read (1: not resumed; 0: no log yet)."""
        return len(self._logs)

    # -- Source -------------------------------------------------------------------------

    def read(self) -> Run:
        if self._open_reader() is None:
            where = self.run_dir or self.path
            raise SourceNotFound(
                f"{where}: not a wandb run (no run-*.wandb transaction log, no latest-run)"
            )
        return self._run(self._read_new())

    def read_summary(self, wanted: set[str]) -> dict[str, float]:
        """Summary values of `wanted` metrics (a second pass over the run's last segment;
        see wandb_summary). Nothing before the run's log exists."""
        from gatekeeper.sources.wandb.summary import summary_values

        return summary_values(self._logs[-1], wanted) if self._logs else {}

    # -- internals ----------------------------------------------------------------------

    def _open_reader(self) -> LogReader | None:
        if self._reader is None:
            if self.run_dir is None:
                self.run_dir = self._resolve()
                if self.run_dir is None:
                    return None  # the run has not started yet
            path = self.log_file or find_log(self.run_dir)
            if path is None or not os.path.exists(path):
                return None  # the writer has not created it yet
            # a named .wandb file is read alone; a run directory with its earlier segments
            self._logs = [path] if self.log_file else [*earlier_segments(self.run_dir), path]
            self._reader = LogReader(self._logs[0])
            self._count_segments()
        return self._reader

    def _count_segments(self) -> None:
        if len(self._logs) > 1:
            self._meta["segments"] = len(self._logs)

    def _read_new(self) -> dict[str, Series]:
        """Every new record of every segment from the cursor on; per metric, its new points."""
        assert self._reader is not None
        chunks: dict[str, list[Series]] = {}
        while True:
            for metric, part in self._decode(self._reader).items():
                chunks.setdefault(metric, []).append(part)
            if self._segment + 1 >= len(self._logs):
                break
            # an earlier segment is read to its end (a later one exists: its writer is gone)
            self._segment += 1
            self._reader = LogReader(self._logs[self._segment])
            self._join.next_segment()
            self._state = RunState.RUNNING  # the run's state is the last segment's
            self._meta.pop("exit_code", None)
        merged: dict[str, Series] = {}
        for m, parts in sorted(chunks.items()):
            pieces = [(p.steps, p.values) for p in parts]
            merged[m] = parts[0] if len(parts) == 1 else merge_chunks(m, pieces, parts[-1].step_key)
        return merged

    def _resolve(self) -> str | None:
        if self.runs_before is not None:
            return new_run_dir(self.path, self.runs_before)
        return resolve_run_dir(self.path)

    def _decode(self, reader: LogReader) -> dict[str, Series]:
        """Read every new complete record; history goes to columns (each `_step` where
        `_join` places it), the rest to metadata."""
        # imported here: the decoder is protobuf's (gatekeeper[wandb]), and the family is
        # imported by every detection pass
        from gatekeeper.sources.wandb.decode import decode

        part = decode(reader.path, reader.offset)
        reader.offset, reader.pending_bytes = part.end, part.pending
        for rec in part.meta:
            self._apply(rec.WhichOneof("record_type"), rec)
        cols = Columns(self._carry, where=reader.path, forms=self._forms)
        cols.steps = self._join.place(part.steps, part.step_log_at)
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
            code = rec.exit.exit_code
            self._state = RunState.FINISHED if code == 0 else RunState.FAILED
            self._meta["exit_code"] = code

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
            carries_state=True,
            state_detail=self._state_detail(),
        )

    def _state_detail(self) -> str:
        code = self._meta.get("exit_code")
        segments = self._meta.get("segments")
        resumed = f"; resumed, {segments} segments read" if segments else ""
        if code is not None:
            return f"wandb exit code {code}{resumed}"
        log = os.path.basename(self._logs[-1]) if self._logs else "the .wandb log"
        return f"no exit record in {log}{resumed}"


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


__all__ = ["WandbLocalSource", "names_one_run", "new_run_dir", "resolve_run_dir", "run_dirs"]
