"""`TensorBoardSource`: one run's event files (`events.out.tfevents.*`), read and tailed.

A run is a directory holding event files (one per process or restart, all merged by step)
or one event file. `tensorboard://PATH` (or `tb://PATH`) names one explicitly, which a
watch needs when the directory does not exist yet. Each file is tailed by byte offset, so
a poll costs O(new bytes); a record cut at the end of a file is pending while live and a
truncation error on a final read. TensorBoard carries no run state: the run is judged on
its data (state `unknown`).
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from gatekeeper.errors import RecordError, SourceError, SourceNotFound
from gatekeeper.extras import require
from gatekeeper.model import Run, merge_chunks
from gatekeeper.sources.base import LiveSource, Poll, check_cursor_version
from gatekeeper.sources.tensorboard.scheme import SCHEMES

FILE_MARK = "events.out.tfevents."
STEP_KEY = "step"
_CURSOR_VERSION = 1
READ_CHUNK = 64 << 20
_STAMP = re.compile(r"tfevents\.(\d+)")


def is_event_file(path: str) -> bool:
    return os.path.basename(path).startswith(FILE_MARK)


def event_files(directory: str) -> list[str]:
    """The event files directly in `directory`, oldest first (the writer's timestamp, then
    name), so a restart's points follow the first run's."""
    found = [p for p in glob.glob(os.path.join(glob.escape(directory), FILE_MARK + "*"))
             if os.path.isfile(p)]

    def order(path: str) -> tuple[int, str]:
        m = _STAMP.search(os.path.basename(path))
        return (int(m.group(1)) if m else 0, os.path.basename(path))

    return sorted(found, key=order)


def is_run_dir(path: str) -> bool:
    return os.path.isdir(path) and bool(event_files(path))


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

    @classmethod
    def accepts(cls, spec: str) -> bool:
        if spec.startswith(SCHEMES):
            return True
        if "://" in spec and not spec.startswith("file://"):
            return False
        path = spec.removeprefix("file://")
        return is_event_file(path) or is_run_dir(path)

    def files(self) -> list[str]:
        if is_event_file(self.path):
            return [self.path] if os.path.isfile(self.path) else []
        return event_files(self.path) if os.path.isdir(self.path) else []

    # -- Source -------------------------------------------------------------------------

    def read(self) -> Run:
        if not self.files():
            raise SourceNotFound(
                f"{self.path}: no TensorBoard event files ({FILE_MARK}*); point at one run's "
                "directory, not a log dir of runs"
            )
        self._offsets, self._pending, self._plugins = {}, {}, {}
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

    # -- LiveSource ---------------------------------------------------------------------

    def poll(self) -> Poll:
        # imported here: declaring the protobuf messages is not free, and `import
        # gatekeeper.cli` must stay cheap for runs that never read TensorBoard
        from gatekeeper.sources.tensorboard.events import Columns

        columns = Columns(plugins=self._plugins)
        for path in self.files():
            self._read_new(path, columns)
        series = {
            tag: merge_chunks(tag, [columns.series(tag)], STEP_KEY)
            for tag in sorted(columns.chunks)
        }
        return Poll(series=series, run=self._run(), ended=False, points=columns.points)

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "offsets": dict(self._offsets),
            "plugins": dict(self._plugins),
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        check_cursor_version(cursor, _CURSOR_VERSION, self.spec)
        self._offsets = {str(k): int(v) for k, v in cursor.get("offsets", {}).items()}
        self._plugins = {str(k): str(v) for k, v in cursor.get("plugins", {}).items()}

    # -- internals ----------------------------------------------------------------------

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
                    decode(framed, columns, path)
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
