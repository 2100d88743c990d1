"""JSONL metric records: per-step rows, the miles record form and end markers, into numpy.

Three line shapes, detected per line, so files and directories may mix them:

- row:     {"train/step": 3, "train/loss": 0.41}  /  {"step": 3, "loss": 0.41}
- record:  {"metric": "train/ppo_kl", "series": [[0, 1e-10], [1, 0.0003]]}  (`records`)
- event:   {"event": "end", "state": "finished"}  (optional end-of-run marker)

One way through a block of lines (docs/jsonl-reading.md): every line is parsed with
orjson; the objects are grouped by key order, a row's values kept as one flat list and its
dict dropped; then each group is converted, rows of one key order into one float64 table.
Non-finite values may be the strings "NaN", "Infinity", "-Infinity" or the bare tokens
Python's json module writes; a null value is a non-finite point too (DESIGN: a null where
a metric has numbers elsewhere).

What is refused, with file:line: a step that is not a whole number fitting int64 (a bool,
a string, 1e300, 2**63); a value that is neither a number, null nor a marker (a numeric
string such as "0.5" included); a number too large for a float; a line nested deeper than
orjson's 1024 levels; text that is not UTF-8. A block's first error is its first line
that is not JSON, then its first line that is not an object, then the groups' errors in
the order each group's first line comes.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Literal

import numpy as np
import orjson

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import STEP_DTYPE, VALUE_DTYPE, Series, merge_chunks
from gatekeeper.safe_open import open_regular
from gatekeeper.sources.jsonl.lines import BLANK, reload_line
from gatekeeper.sources.jsonl.records import (
    DEFAULT_STEP_ALIASES,
    Converted,
    convert_record,
    default_step_key,
    is_step_key,
)
from gatekeeper.sources.jsonl.values import (
    as_steps,
    coerce_value,
    fast_floats,
    key_quotes,
    only_marker_strings,
    step_of,
)

__all__ = [
    "BLOCK_SIZE", "DEFAULT_STEP_ALIASES", "JsonlParser", "default_step_key", "is_step_key",
    "jsonl_files", "parse_file",
]

BLOCK_SIZE = 8 << 20
_QUOTE = ord('"')
EVENT_KEYS = frozenset({"event", "state", "time", "message", "reason"})
_Kind = Literal["row", "record", "event"]  # a line's shape, told by its keys


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsed JSON holds no reference cycles, but millions of fresh objects make the cyclic
    collector run over and over (2x the parse time on a 100k-point series): pause it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Group:
    """The lines of a block that share one key order."""

    kind: _Kind
    lines: list[int] = field(default_factory=list)  # their line numbers
    at: list[int] = field(default_factory=list)  # their indices in the block
    # rows: their values, one flat list (row i is items[i*width:(i+1)*width]); records:
    # their series converted (`Converted`), each line's objects dropped at once (a
    # 100k-point series is ~14 MB of them); end markers: their objects
    items: list[Any] = field(default_factory=list)
    plain: bool = False  # rows: every string among the values is a marker (numpy may convert)
    error: RecordError | None = None  # records: the first line that did not convert


def _kind(keys: tuple[str, ...]) -> _Kind:
    if "metric" in keys and "series" in keys:
        return "record"
    if "event" in keys and set(keys) <= EVENT_KEYS:
        return "event"
    return "row"


@dataclass
class JsonlParser:
    """Incremental parser: feed bytes, get complete lines turned into series chunks.

    `feed` consumes only whole lines and returns how many bytes it used, so a caller
    tailing a live file keeps the partial last line for the next read.
    """

    path: str
    step_aliases: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_STEP_ALIASES))
    line: int = 0  # lines consumed so far
    chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    step_keys: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # metric -> why it cannot be judged (a null step in a record line); the rest is judged
    metric_errors: dict[str, str] = field(default_factory=dict)
    record_metrics: set[str] = field(default_factory=set)  # metrics from record lines
    _last_steps: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def feed(self, data: bytes | memoryview, *, final: bool) -> int:
        """Parse the complete lines of `data`; with `final`, a partial tail is an error.
        Returns how many bytes were consumed (whole lines only, unless `final`)."""
        buf = data if isinstance(data, bytes) else bytes(data)
        pieces = buf.split(b"\n")
        tail = pieces.pop()  # after the last newline: b"" or a partial line
        if tail.strip() and final:
            self._truncated(tail, self.line + len(pieces) + 1)
        self.parse_lines(pieces)
        return len(buf) - (0 if final else len(tail))

    def _truncated(self, tail: bytes, line: int) -> None:
        raise RecordError(
            f"last line is truncated (no trailing newline; {len(tail)} bytes: "
            f"{quote(tail[:40].decode('utf-8', 'replace'))}); the file was cut off "
            "mid-write — it is not judged as whole",
            file=self.path,
            line=line,
        )

    def parse_lines(self, pieces: list[bytes], *, quotes: int | None = None) -> None:
        """Parse whole lines, in file order: the one way every block is read (see the
        module's docstring). `quotes` is given by `parse_file` for lines it split off at
        their newlines (an error quotes a line with it, as the file holds it): how many
        '"' they hold, counted at once."""
        nl = b"\n" if quotes is not None else b""
        with _gc_paused():
            groups = self._group_lines(pieces, nl)
            self._mark_plain(groups, pieces, quotes)
            # several groups: per metric, the line numbers of each chunk this block adds
            lines: dict[str, list[np.ndarray]] | None = (
                {} if sum(g.kind != "event" for g in groups.values()) > 1 else None)
            for keys, group in groups.items():
                if group.kind == "record":
                    for conv, line in zip(group.items, group.lines, strict=False):
                        self._commit_record(conv)
                        if lines is not None:
                            lines.setdefault(conv.metric, []).append(
                                np.full(conv.steps.size, line))
                    if group.error is not None:  # raised in its turn, as if met here
                        raise group.error
                elif group.kind == "event":
                    for obj, line in zip(group.items, group.lines, strict=True):
                        self.events.append({**obj, "line": line})
                else:
                    self._row_group(keys, group)
                    if lines is not None:
                        at = np.asarray(group.lines)
                        for key in keys:
                            if not is_step_key(key):
                                lines.setdefault(key, []).append(at)
            if lines is not None:
                self._in_line_order(lines)

    def _in_line_order(self, lines: dict[str, list[np.ndarray]]) -> None:
        """A metric that lines of several key orders (or record lines) logged in this block:
        its chunks of the block joined in step order, equal steps in the order of their
        lines, as a poll that held one line at a time has them (grouped by key order, two
        points at one step came in the order of their groups: where a block or a poll
        ended changed the order, and so `last`, `for` and windowed verdicts)."""
        for metric, parts in lines.items():
            if len(parts) < 2:
                continue
            chunks = self.chunks[metric]
            mine = chunks[-len(parts) :]
            steps = np.concatenate([c[0] for c in mine])
            values = np.concatenate([c[1] for c in mine])
            order = np.lexsort((np.concatenate(parts), steps))
            chunks[-len(parts) :] = [(steps[order], values[order])]

    def _group_lines(self, pieces: list[bytes], nl: bytes) -> dict[tuple[str, ...], _Group]:
        """Every line parsed (the first that is not JSON is the block's error), then the
        first that is not an object refused, and the objects grouped by key order in the
        order each first comes. The hot loop does only what must be per line."""
        start = self.line + 1
        groups: dict[tuple[str, ...], _Group] = {}
        not_object: tuple[int, Any] | None = None
        loads = orjson.loads
        for k, raw in enumerate(pieces):
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                obj = reload_line(raw + nl, self.path, start + k)
                if obj is BLANK:
                    continue
            if type(obj) is not dict:
                not_object = not_object or (start + k, obj)
                continue
            keys = tuple(obj)
            group = groups.get(keys)
            if group is None:
                group = groups[keys] = _Group(_kind(keys))
            group.at.append(k)
            if group.kind == "row":
                group.items.extend(obj.values())
            elif group.kind == "event":
                group.items.append(obj)
            elif group.error is None:
                try:  # changes nothing on the parser: committed in the group's turn
                    group.items.append(convert_record(
                        obj, raw, self.path, start + k, self.step_aliases))
                except RecordError as exc:
                    group.error = exc
                del obj  # before the next line is parsed: one series' objects alive at once
        self.line += len(pieces)
        for group in groups.values():
            group.lines = [start + k for k in group.at]
        if not_object is not None:
            raise RecordError(
                f"expected a JSON object per line, got {type(not_object[1]).__name__}",
                file=self.path,
                line=not_object[0],
            )
        return groups

    @staticmethod
    def _mark_plain(
        groups: dict[tuple[str, ...], _Group], pieces: list[bytes], quotes: int | None
    ) -> None:
        """Mark the row groups whose strings are all markers, so numpy may convert them at
        once (it parses any string, "0.5" too). A row holds at least its keys' quotes: when
        the block holds no more '"' than its rows' keys and its other lines take, no row
        holds a string; otherwise a row with more quotes than its keys is looked at."""
        rows = [(keys, g) for keys, g in groups.items() if g.kind == "row"]
        if all(key_quotes(keys) >= 0 for keys, _ in rows):
            total = quotes if quotes is not None else sum(map(bytes.count, pieces, repeat(b'"')))
            others = sum(pieces[k].count(b'"') for g in groups.values() if g.kind != "row"
                         for k in g.at)
            if total == others + sum(key_quotes(keys) * len(g.at) for keys, g in rows):
                for _, group in rows:
                    group.plain = True
                return
        for keys, group in rows:
            expected, width = key_quotes(keys), len(keys)
            group.plain = all(
                pieces[k].count(b'"') == expected
                or only_marker_strings(group.items[i * width : (i + 1) * width])
                for i, k in enumerate(group.at)
            )

    def _commit_record(self, conv: Converted) -> None:
        self.record_metrics.add(conv.metric)
        if conv.null_step is not None:
            self.metric_errors.setdefault(conv.metric, conv.null_step)
        self._add(conv.metric, conv.step_key, conv.steps, conv.values)

    def _row_group(self, keys: tuple[str, ...], group: _Group) -> None:
        """The metrics of rows of one key order: one float64 table when numpy may convert
        the values at once, else column by column, value by value (errors name the line)."""
        width, items = len(keys), group.items
        table = None
        if group.plain:
            flat = fast_floats(items, len(items))
            table = None if flat is None else flat.reshape(len(group.lines), width)
        index = {k: i for i, k in enumerate(keys)}
        step_columns: dict[str, np.ndarray] = {}  # one int64 copy per axis, shared by metrics
        for j, key in enumerate(keys):
            if is_step_key(key):
                continue
            step_key = self._row_step_key(key, index)
            if step_key is None:
                raise RecordError(
                    f"no step field for metric {quote(key)}: a row needs \"step\", \"_step\" or "
                    f"{quote(default_step_key(key, self.step_aliases))}",
                    file=self.path,
                    line=group.lines[0],
                )
            steps = step_columns.get(step_key)
            if steps is None:
                steps = step_columns[step_key] = self._row_steps(
                    step_key, index[step_key], width, group, table)
            if table is not None:
                values = np.array(table[:, j], dtype=VALUE_DTYPE)  # a copy, not a strided view
            else:
                values = np.array([
                    coerce_value(v, self.path, ln, f"field {quote(key)}")
                    for v, ln in zip(items[j::width], group.lines, strict=True)
                ], dtype=VALUE_DTYPE)
            self._add(key, step_key, steps, values)

    def _row_steps(
        self, key: str, j: int, width: int, group: _Group, table: np.ndarray | None
    ) -> np.ndarray:
        what = f"step field {quote(key)}"
        if table is not None:
            return as_steps(
                table[:, j], lambda: group.items[j::width], self.path, group.lines,
                lambda i: what,
            )
        return np.array(
            [step_of(v, self.path, ln, what)
             for v, ln in zip(group.items[j::width], group.lines, strict=True)],
            dtype=STEP_DTYPE,
        )

    def _row_step_key(self, key: str, index: dict[str, int]) -> str | None:
        ns, sep, _ = key.partition("/")
        candidates = []
        if sep:
            candidates.append(f"{ns}/step")
            if ns in self.step_aliases:
                candidates.append(self.step_aliases[ns])
        candidates += ["step", "_step"]
        return next((c for c in candidates if c in index), None)

    def _add(self, metric: str, step_key: str, steps: np.ndarray, values: np.ndarray) -> None:
        known = self.step_keys.setdefault(metric, step_key)
        if known != step_key:
            raise RecordError(
                f"metric {quote(metric)} is logged against step field {quote(step_key)} here "
                f"but against {quote(known)} earlier; a metric must stay on one step axis",
                file=self.path,
                line=self.line,
            )
        # a run logs its metrics at the same steps: keep one array per axis while it holds
        # (the record form's 50 series of 100k points: 40 MB less at the peak)
        last = self._last_steps.get(step_key)
        if last is not None and last is not steps and np.array_equal(last, steps):
            steps = last
        else:
            self._last_steps[step_key] = steps
        self.chunks.setdefault(metric, []).append((steps, values))

    def coalesce(self) -> None:
        """Join each metric's chunks into one, in order (what `merge_chunks` would do),
        joining each run of shared step chunks once: the metrics of a row share their
        steps arrays block by block, and keep sharing one array for the whole file."""
        # by the ids of the step chunks, kept alive beside the join so no id is reused
        joined: dict[tuple[int, ...], tuple[np.ndarray, list[np.ndarray]]] = {}
        for metric, parts in self.chunks.items():
            if len(parts) < 2:
                continue
            ids = tuple(id(s) for s, _ in parts)
            if ids not in joined:
                kept = [s for s, _ in parts]
                joined[ids] = (np.concatenate(kept), kept)
            values = np.concatenate([v for _, v in parts])
            self.chunks[metric] = [(joined[ids][0], values)]

    def take_series(self) -> dict[str, Series]:
        """Merge what was parsed into sorted series and reset the chunk buffers."""
        out = {
            metric: merge_chunks(metric, chunks, self.step_keys[metric])
            for metric, chunks in self.chunks.items()
        }
        self.chunks = {}
        return out


def parse_file(parser: JsonlParser, offset: int = 0, *, final: bool) -> int:
    """Feed a file from byte `offset` to `parser`; return the offset after the last whole
    line. With `final`, a last line without its newline is a truncation error.

    The file is read in blocks, each split at its newlines in C; a block's partial last
    line is read again at the start of the next one (a line longer than a block is
    gathered until its newline comes)."""
    pos = offset
    parts: list[bytes] = []  # a line longer than a block, read so far
    with open_regular(parser.path) as fh:
        fh.seek(offset)
        while True:
            data = fh.read(BLOCK_SIZE)
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            if not cut:
                parts.append(data)
                continue
            if cut < len(data):
                fh.seek(cut - len(data), os.SEEK_CUR)  # the partial line: read it again
            if parts:  # the end of a long line: its parts and this block's whole lines
                parts.append(data[:cut])
                data, parts = b"".join(parts), []
                cut = len(data)
            pos += cut
            pieces = data.split(b"\n")
            pieces.pop()  # after the last newline: b"" or that partial line
            # '"' counted by numpy: a quarter of bytes.count's time
            quotes = int(np.count_nonzero(np.frombuffer(data, np.uint8, cut) == _QUOTE))
            parser.parse_lines(pieces, quotes=quotes)
    parser.coalesce()
    tail = b"".join(parts)
    if tail and final:
        if tail.strip():
            parser._truncated(tail, parser.line + 1)
        parser.line += 1
        return pos + len(tail)
    return pos


def jsonl_files(directory: str) -> list[str]:
    """The record files of a run directory, in a stable order (each one is checked to be a
    regular file when it is opened: a FIFO named `a.jsonl` is an error, not a hang)."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    return [os.path.join(directory, n) for n in names]
