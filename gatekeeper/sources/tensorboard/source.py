"""`TensorBoardSource`: one run's event files (`events.out.tfevents.*`), read and tailed.

A run is a directory holding event files (one per process or restart) or one event file.
The files are read in name order, as TensorBoard reads them, and a restart's discards are
applied as TensorBoard applies them (restarts.py): a `purge_step` resume drops the points
it re-logs. `tensorboard://PATH` (or `tb://PATH`) names one explicitly, which a
watch needs when the directory does not exist yet. Each file is tailed by byte offset, so
a poll costs O(new bytes); a record cut at the end of a file is pending while live and a
truncation error on a final read; a poll whose restart discards points an earlier poll
delivered reads the run again and says so (`Poll.reset`), so a live verdict ends where a
whole read does. TensorBoard carries no run state: the run is judged on its data (state
`unknown`).
"""

from __future__ import annotations

import os
from typing import Any

from gatekeeper.errors import RecordError, SourceError, SourceNotFound
from gatekeeper.extras import require
from gatekeeper.model import Run, merge_chunks
from gatekeeper.sources.base import LiveSource, Poll, check_cursor_version
from gatekeeper.sources.tensorboard.logdir import (
    FILE_MARK,
    event_files,
    is_event_file,
    is_log_dir_of_runs,
    is_run_dir,
    runs_in,
)
from gatekeeper.sources.tensorboard.restarts import Restarts
from gatekeeper.sources.tensorboard.scheme import SCHEMES

STEP_KEY = "step"
_CURSOR_VERSION = 2
READ_CHUNK = 64 << 20


class TensorBoardSource(LiveSource):
    """Scalars of a TensorBoard run, every point (no reservoir sampling), CRCs verified."""

    kind = "tensorboard://LOGDIR/RUN (or an events.out.tfevents.* file or its directory)"
    example = "tensorboard://runs/grpo-7b"

    def __init__(self, spec: str):
        require("tensorboard", "reading TensorBoard event files")
        super().__init__(spec)
        path = spec
        for scheme in SCHEMES:
            path = path.removeprefix(scheme)
        self.path = path.removeprefix("file://")
        self._offsets: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._plugins: dict[str, str] = {}
        self._restarts = Restarts()
        self._reread = False  # the next poll holds the run whole (`Poll.reset`)

    @classmethod
    def accepts(cls, spec: str) -> bool:
        if spec.startswith(SCHEMES):
            return True
        if "://" in spec and not spec.startswith("file://"):
            return False
        path = spec.removeprefix("file://")
        # a log dir of runs too: `read` names them and asks for one
        return is_event_file(path) or is_run_dir(path) or is_log_dir_of_runs(path)

    def files(self) -> list[str]:
        if is_event_file(self.path):
            return [self.path] if os.path.isfile(self.path) else []
        return event_files(self.path) if os.path.isdir(self.path) else []

    # -- Source -------------------------------------------------------------------------

    def read(self) -> Run:
        if not self.files():
            if is_log_dir_of_runs(self.path):
                raise SourceError(self.which_run())
            raise SourceNotFound(
                f"{self.path}: no TensorBoard event files ({FILE_MARK}*); point at one run's "
                "directory, not a log dir of runs"
            )
        self._forget()
        poll = self.poll()
        for path in self.files():
            cut = self._pending.get(os.path.basename(path), 0)
            if cut:
                offset = self._offsets[os.path.basename(path)]
                raise RecordError(
                    f"byte offset {offset}: truncated record (the file ends {cut} bytes into "
                    "it; the writer was killed or the file was cut)",
                    file=path,
                )
        poll.run.series = poll.series
        return poll.run

    def which_run(self) -> str:
        """A log dir of several runs: name them and ask for one (the newest as example)."""
        runs = runs_in(self.path)
        newest = max(runs, key=lambda r: (os.path.getmtime(os.path.join(self.path, r)), r))
        shown = ", ".join(runs[:8]) + (f", ... ({len(runs) - 8} more)" if len(runs) > 8 else "")
        return (
            f"{self.path}: a TensorBoard log dir of {len(runs)} run(s): {shown}; gatekeeper "
            f"judges one run: pass its directory, e.g. {os.path.join(self.path, newest)}"
        )

    # -- LiveSource ---------------------------------------------------------------------

    def poll(self) -> Poll:
        poll = self._poll_once()
        if poll is None:  # a restart discarded points delivered before: read it all again
            self._forget()
            poll = self._poll_once()
            assert poll is not None, "a first read cannot reach points delivered before"
            self._reread = True
        poll.reset, self._reread = self._reread, False
        return poll

    def _poll_once(self) -> Poll | None:
        # imported here: declaring the protobuf messages is not free, and `import
        # gatekeeper.cli` must stay cheap for runs that never read TensorBoard
        from gatekeeper.sources.tensorboard.events import Columns

        columns = Columns(plugins=self._plugins)
        read_before = [n for n, offset in self._offsets.items() if offset]
        last = max(read_before, default=None)
        grew_early = False  # a file before one already read got records: order changed
        for path in self.files():
            name, before = os.path.basename(path), self._offsets.get(os.path.basename(path), 0)
            self._read_new(path, columns)
            grew_early |= last is not None and name < last and self._offsets[name] > before
        if grew_early and self._restarts.ordered:
            return None
        if not self._restarts.settle(columns.chunks):
            return None
        series = {
            tag: merge_chunks(tag, [columns.series(tag)], STEP_KEY)
            for tag in sorted(columns.chunks)
        }
        points = sum(len(s) for s in series.values())
        return Poll(series=series, run=self._run(), ended=False, points=points)

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "offsets": dict(self._offsets),
            "plugins": dict(self._plugins),
            "restarts": self._restarts.to_cursor(),
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        if cursor.get("version") == 1:  # kept no restart state: read the run again whole
            self._forget()
            self._reread = True
            return
        check_cursor_version(cursor, _CURSOR_VERSION, self.spec)
        self._offsets = {str(k): int(v) for k, v in cursor.get("offsets", {}).items()}
        self._plugins = {str(k): str(v) for k, v in cursor.get("plugins", {}).items()}
        self._restarts = Restarts.from_cursor(cursor["restarts"])

    # -- internals ----------------------------------------------------------------------

    def _forget(self) -> None:
        """Back to the start of every file: the next poll reads the run whole."""
        self._offsets, self._pending, self._plugins = {}, {}, {}
        self._restarts = Restarts()

    def _read_new(self, path: str, columns: Any) -> None:
        from gatekeeper.sources.tensorboard.events import decode
        from gatekeeper.sources.tensorboard.records import frame

        name = os.path.basename(path)
        offset = self._offsets.get(name, 0)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < offset:
                    raise RecordError(
                        f"file shrank to {size} bytes below the {offset} already read; "
                        "it was replaced or truncated",
                        file=path,
                    )
                chunk = READ_CHUNK  # bounds memory on a first read of a large file
                while offset < size:
                    fh.seek(offset)
                    want = min(size - offset, chunk)
                    framed = frame(fh.read(want), offset, path)
                    decode(framed, columns, path, self._restarts)
                    if framed.end == offset and want < size - offset:
                        chunk *= 2  # one record larger than the chunk: read more of it
                        continue
                    if framed.end == offset:
                        break  # a partial record at the end: pending
                    offset = framed.end
        except OSError as exc:
            raise SourceError(f"{path}: cannot read: {exc.strerror}") from None
        self._offsets[name] = offset
        self._pending[name] = size - offset

    def _run(self) -> Run:
        directory = os.path.dirname(self.path) if is_event_file(self.path) else self.path
        name = os.path.basename(os.path.normpath(os.path.abspath(directory or ".")))
        return Run(name=name, source=self.path)
