"""`LiveJsonlSource`: a JSONL record file or run directory followed while it is written.

Three ways a trainer writes JSONL, all followed at O(new data) per poll where the writer
allows it:

- appended (per-step rows, one record line per log call): tailed from a byte offset;
- atomically rewritten (miles writes its record file to a temp file and renames it over
  the old one on every log call): the new file is detected by inode, by shrinking, or by
  the bytes before the offset no longer matching; it is re-read whole (the writer leaves
  no other way) and only the points beyond those already emitted per metric are new;
- a directory of per-process `*.jsonl` files: files are picked up as they appear.

A source that does not exist yet, and a partially written last line, are not errors:
the poll returns nothing new. The run has ended when every file seen has written its
end marker (`{"event": "end", "state": "finished"}`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from gatekeeper.errors import SourceError
from gatekeeper.model import Run, RunState, merge_chunks
from gatekeeper.safe_open import open_regular
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.sources.jsonl.reader import BLOCK_SIZE, JsonlParser
from gatekeeper.sources.jsonl.source import JsonlSource, end_state

_CURSOR_VERSION = 1
_SIG_BYTES = 64  # bytes before the offset that must still match for a file to be "appended"


@dataclass
class _Tail:
    """Read position in one record file, and how many points of each metric it gave."""

    path: str
    offset: int = 0
    ino: int | None = None
    dev: int | None = None
    sig: str = ""  # hex of the _SIG_BYTES before `offset`
    line: int = 0
    emitted: dict[str, int] = field(default_factory=dict)
    ended: RunState | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "ino": self.ino,
            "dev": self.dev,
            "sig": self.sig,
            "line": self.line,
            "emitted": dict(self.emitted),
            "ended": self.ended.value if self.ended else None,
        }

    @classmethod
    def from_json(cls, path: str, data: dict[str, Any]) -> _Tail:
        ended = data.get("ended")
        return cls(
            path=path,
            offset=int(data["offset"]),
            ino=data.get("ino"),
            dev=data.get("dev"),
            sig=str(data.get("sig", "")),
            line=int(data.get("line", 0)),
            emitted={str(k): int(v) for k, v in dict(data.get("emitted", {})).items()},
            ended=RunState(ended) if ended else None,
        )


class LiveJsonlSource(LiveSource):
    """A JSONL run (file or directory, possibly not created yet) followed by cursor."""

    kind = "jsonl"

    def __init__(self, spec: str, step_aliases: dict[str, str] | None = None):
        super().__init__(spec)
        self._whole = JsonlSource(spec, step_aliases)  # reused for `read()` and metadata
        self.path = self._whole.path
        self.step_aliases = step_aliases
        self.tails: dict[str, _Tail] = {}
        self.step_keys: dict[str, str] = {}
        self.metric_errors: dict[str, str] = {}  # a null step in a record: that metric only
        self._is_dir = False  # what the last `_files` found the path to be

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return JsonlSource.accepts(spec)

    def read(self) -> Run:
        return self._whole.read()

    # -- LiveSource ---------------------------------------------------------------------
    def poll(self) -> Poll:
        chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for path in self._files():
            tail = self.tails.get(path)
            if tail is None:
                tail = self.tails[path] = _Tail(path)
            self._poll_file(tail, chunks)
        ordered: dict[int, bool] = {}  # a row's metrics share one steps array: check it once
        series = {
            metric: merge_chunks(metric, parts, self.step_keys[metric], ordered)
            for metric, parts in sorted(chunks.items())
        }
        points = sum(len(s) for s in series.values())
        ended = bool(self.tails) and all(t.ended is not None for t in self.tails.values())
        state = self._files_end_state() if ended else RunState.RUNNING
        run = self._whole.run_from({}, state, self._is_dir)
        run.metric_errors = dict(self.metric_errors)
        return Poll(series=series, run=run, ended=ended, points=points)

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "files": {p: t.to_json() for p, t in self.tails.items()},
            "step_keys": dict(self.step_keys),
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        if cursor.get("version") != _CURSOR_VERSION:
            raise SourceError(
                f"{self.path}: saved read position has version {cursor.get('version')!r}, "
                f"this gatekeeper reads version {_CURSOR_VERSION}; drop the saved state to re-read"
            )
        self.tails = {p: _Tail.from_json(p, t) for p, t in cursor.get("files", {}).items()}
        self.step_keys = dict(cursor.get("step_keys", {}))

    # -- files --------------------------------------------------------------------------
    def _files(self) -> list[str]:
        """The record files that exist now (none yet is fine: the trainer creates them)."""
        self._is_dir = os.path.isdir(self.path)
        if self._is_dir:
            try:
                # dot-files are writers' temp files, renamed into place when complete
                names = sorted(
                    n for n in os.listdir(self.path) if n.endswith(".jsonl") and n[0] != "."
                )
            except OSError as exc:
                raise SourceError(f"{self.path}: cannot list directory: {exc.strerror}") from None
            return [os.path.join(self.path, n) for n in names]
        try:
            mode = os.stat(self.path).st_mode  # one stat: a writer may rename over it meanwhile
        except FileNotFoundError:
            return []  # not created yet, or between a writer's unlink and rename
        except OSError as exc:
            raise SourceError(f"{self.path}: cannot read: {exc.strerror}") from None
        if stat.S_ISREG(mode):
            return [self.path]
        if stat.S_ISDIR(mode):  # appeared since the isdir() above
            self._is_dir = True
            return []
        raise SourceError(
            f"{self.path}: not a regular file or directory; only regular files are read"
        )

    def _parser(self, tail: _Tail) -> JsonlParser:
        parser = JsonlParser(tail.path, line=tail.line, step_keys=dict(self.step_keys))
        if self.step_aliases is not None:
            parser.step_aliases = dict(self.step_aliases)
        return parser

    def _poll_file(self, tail: _Tail, out: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> None:
        try:
            fh = open_regular(tail.path)  # a FIFO is an error, never a poll that hangs
        except FileNotFoundError:
            return  # renamed away between listing and opening: the next poll sees the new one
        except OSError as exc:
            raise SourceError(f"{tail.path}: cannot read: {exc.strerror}") from None
        with fh:
            st = os.fstat(fh.fileno())
            appended = self._same_file(tail, fh, st)
            parser = self._parser(tail if appended else _Tail(tail.path))
            start = tail.offset if appended else 0
            offset, last = _read_whole_lines(fh, parser, start)
            if len(last) == _SIG_BYTES or offset == start == 0:
                tail.sig = last.hex()  # the bytes just read end at `offset`: no re-read
            elif offset != start or not appended:
                tail.sig = _signature(fh, offset)
            # else: nothing new, and `_same_file` has just matched the signature
        tail.ino, tail.dev, tail.offset, tail.line = st.st_ino, st.st_dev, offset, parser.line
        self._collect(tail, parser, out, skip_emitted=not appended)
        for metric, reason in parser.metric_errors.items():
            self.metric_errors.setdefault(metric, reason)
        for event in parser.events:
            if event.get("event") == "end":
                tail.ended = end_state(event.get("state"))

    @staticmethod
    def _same_file(tail: _Tail, fh: IO[bytes], st: os.stat_result) -> bool:
        """Whether the file is the one read so far, only grown (else it was rewritten)."""
        if tail.ino is None:
            return tail.offset == 0  # first sight: read from the start
        if (st.st_ino, st.st_dev) != (tail.ino, tail.dev) or st.st_size < tail.offset:
            return False
        # An inode number can be reused by the next temp file: check the content too.
        return _signature(fh, tail.offset) == tail.sig

    def _collect(
        self,
        tail: _Tail,
        parser: JsonlParser,
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]],
        *,
        skip_emitted: bool,
    ) -> None:
        """Move the parsed points into `out`; after a rewrite, only those not emitted yet."""
        for metric, parts in parser.chunks.items():
            key = parser.step_keys[metric]
            if self.step_keys.setdefault(metric, key) != key:
                raise SourceError(
                    f"{tail.path}: metric {metric!r} is on step axis {key!r} here but on "
                    f"{self.step_keys[metric]!r} in another file of this run"
                )
            steps = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
            values = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
            done = tail.emitted.get(metric, 0) if skip_emitted else 0
            if steps.size > done:  # whole arrays kept as they are: their steps are shared
                part = (steps[done:], values[done:]) if done else (steps, values)
                out.setdefault(metric, []).append(part)
            if skip_emitted:
                tail.emitted[metric] = max(done, int(steps.size))
            else:
                tail.emitted[metric] = tail.emitted.get(metric, 0) + int(steps.size)
        parser.chunks = {}

    def _files_end_state(self) -> RunState:
        states = [t.ended for t in self.tails.values() if t.ended is not None]
        bad = [s for s in states if s is not RunState.FINISHED]
        return bad[0] if bad else RunState.FINISHED


def _read_whole_lines(fh: IO[bytes], parser: JsonlParser, offset: int) -> tuple[int, bytes]:
    """Parse the whole lines from `offset` on; return the offset after the last of them
    and the last up to _SIG_BYTES bytes of those lines (what `_signature` would read
    back). A partial last line is left for the next poll (the writer is mid-write)."""
    fh.seek(offset)
    pos, last = offset, b""
    while True:
        lines = fh.readlines(BLOCK_SIZE)  # whole lines, read and split in C
        if not lines:
            return pos, last
        partial = not lines[-1].endswith(b"\n")
        if partial:
            lines.pop()
        whole = b"".join(lines)  # rows of one key order: read by C in one call
        if not parser.parse_block(whole, len(whole)):
            parser.parse_lines(lines)
        pos += len(whole)
        last = _last_bytes(last, lines)
        if partial:
            return pos, last


def _last_bytes(before: bytes, lines: list[bytes]) -> bytes:
    """The last _SIG_BYTES bytes of `before` followed by `lines` (fewer when short)."""
    out = b""
    for line in reversed(lines):
        out = line + out
        if len(out) >= _SIG_BYTES:
            return out[-_SIG_BYTES:]
    return (before + out)[-_SIG_BYTES:]


def _signature(fh: IO[bytes], offset: int) -> str:
    start = max(0, offset - _SIG_BYTES)
    fh.seek(start)
    return fh.read(offset - start).hex()
