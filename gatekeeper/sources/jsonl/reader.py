"""JSONL metric records: the miles metric-history form and per-step rows, parsed into numpy.

Two line shapes, detected per line, so files and directories may mix them:

- record:  {"metric": "train/ppo_kl", "series": [[0, 1e-10], [1, 0.0003]]}
- row:     {"train/step": 3, "train/loss": 0.41}  /  {"step": 3, "loss": 0.41}
- event:   {"event": "end", "state": "finished"}  (optional end-of-run marker)

Non-finite values may be the strings "NaN", "Infinity", "-Infinity" or the bare tokens
Python's json module writes; a null value is a non-finite point too (DESIGN: a null where
a metric has numbers elsewhere). Blocks of plain rows are read by the optional C
extension `_rows` when it is built (`parse_block`, docs/jsonl-reading.md); otherwise lines
are parsed with orjson, and rows that share one key set are converted to numpy together,
so no Python object per point outlives its line.

What is refused, always and on every path (fast and slow), with file:line: a step that is
not a whole number fitting int64 (a bool, a string, 1e300, 2**63); a value that is neither
a number, null nor a marker (a numeric string such as "0.5" included); a number too large
for a float; a line nested deeper than orjson's 1024 levels; text that is not UTF-8.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, count, repeat
from typing import Any

import numpy as np
import orjson

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import STEP_DTYPE, VALUE_DTYPE, Series, merge_chunks
from gatekeeper.safe_open import open_regular
from gatekeeper.sources.jsonl.values import (
    Same,
    as_steps,
    coerce_value,
    fast_floats,
    finite_float,
    int_text,
    key_quotes,
    only_marker_strings,
    record_quotes,
    step_of,
)
from gatekeeper.sources.slowpath import load_extension, note_python_path

BLOCK_SIZE = 8 << 20
_QUOTE = ord('"')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# miles logs perf/* against rollout/step; other namespaces use "<ns>/step".
DEFAULT_STEP_ALIASES: dict[str, str] = {"perf": "rollout/step"}
EVENT_KEYS = frozenset({"event", "state", "time", "message", "reason"})

# Read blocks of rows of one key order with the C extension `_rows` when it is built (the
# tests set it False to compare both paths; the results are the same bit for bit).
USE_C = True
_C_MAX_KEY_ORDERS = 16  # per parser: more key orders than this are left to the Python ways


@functools.cache
def _c_module() -> Any:
    """The compiled rows reader, or None (not built here: no C compiler at install)."""
    return load_extension("gatekeeper.sources.jsonl._rows", __name__, "JSONL rows are")


def c_rows_status() -> str:
    """Which path reads per-step rows here, for --debug and the tests."""
    if _c_module() is None:
        return "pure Python (the C extension gatekeeper.sources.jsonl._rows is not built)"
    if not USE_C:
        return "pure Python (switched off: gatekeeper.sources.jsonl.reader.USE_C is False)"
    return "C (gatekeeper.sources.jsonl._rows), the Python ways for blocks it declines"


def _note_python_path(why: str) -> None:
    note_python_path(__name__, "JSONL rows are", why)


def is_step_key(key: str) -> bool:
    return key in ("step", "_step") or key.endswith("/step")


def default_step_key(metric: str, aliases: dict[str, str] | None = None) -> str:
    """The axis a metric of a record line lives on: `<ns>/step`, an alias, or `step`."""
    aliases = DEFAULT_STEP_ALIASES if aliases is None else aliases
    ns, sep, _ = metric.partition("/")
    if not sep:
        return "step"
    return aliases.get(ns, f"{ns}/step")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsed JSON holds no reference cycles, but millions of fresh lists make the cyclic
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
    """Lines of one key order: their parsed objects, line numbers and raw bytes."""

    rows: list[Any] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)  # the lines as read, for their quotes


@dataclass
class _Converted:
    """A record line's series, converted and not yet added."""

    metric: str
    step_key: str
    steps: np.ndarray
    values: np.ndarray
    null_step: str | None  # why the metric cannot be judged (a null step), if it cannot


class _NotUniform(Exception):
    """A line of a block is a row with another key order than the block's first."""


class _Unusual(Exception):
    """A fast way meets a line it leaves to `_parse_lines` (a blank line)."""


class _LazyRows:
    """The rows of a block read a fast way, parsed again one by one only where a value
    must be looked at as written (a step of 0 or 1 may have been true or false)."""

    def __init__(
        self, raws: list[bytes], lines: int | list[int], nl: bytes,
        load: Callable[[bytes, int, bytes], Any],
    ):
        self.raws, self.lines, self.nl, self.load = raws, lines, nl, load

    def __getitem__(self, i: int) -> Any:
        line = self.lines + i if isinstance(self.lines, int) else self.lines[i]
        return self.load(self.raws[i], line, self.nl)

    def __len__(self) -> int:
        return len(self.raws)


class _BlockRows:
    """The rows of a block read by C (all of them, or those at the line indices `at`),
    split and parsed again one by one only where a step must be looked at as written
    (beyond 2**53, a fraction, NaN, out of int64)."""

    def __init__(
        self, data: bytes, end: int, start: int, nl: bytes,
        load: Callable[[bytes, int, bytes], Any], at: list[int] | None = None,
    ):
        self.data, self.end, self.start, self.nl, self.load = data, end, start, nl, load
        self.at = at
        self.pieces: list[bytes] | None = None

    def __getitem__(self, i: int) -> Any:
        if self.pieces is None:
            self.pieces = self.data[: self.end].split(b"\n")
        k = i if self.at is None else self.at[i]
        return self.load(self.pieces[k], self.start + k, self.nl)


class _Field:
    """One field of every row, looked up only at the indices asked for."""

    def __init__(self, rows: Any, key: str):
        self.rows, self.key = rows, key

    def __getitem__(self, i: int) -> Any:
        return self.rows[i][self.key]

    def __len__(self) -> int:
        return len(self.rows)


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
    # the key orders of rows C has met, as orjson writes their keys (for `_rows.grouped`)
    _c_tables: dict[tuple[str, ...], tuple[bytes, ...]] = field(default_factory=dict, repr=False)

    def feed(self, data: bytes | memoryview, *, final: bool) -> int:
        """Parse the complete lines of `data`; with `final`, a partial tail is an error.
        Returns how many bytes were consumed (whole lines only, unless `final`)."""
        buf = data if isinstance(data, bytes) else bytes(data)
        cut = buf.rfind(b"\n") + 1
        if cut and not (final and buf[cut:].strip()) and self.parse_block(buf, cut, nl=b""):
            return len(buf) if final else cut
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

    def parse_block(self, data: bytes, end: int, *, nl: bytes = b"\n") -> bool:
        """The first fast way, before a block is split into lines: rows of one key order
        read by the C extension `_rows` in one call, the GIL released, straight into
        float64 columns (see _rows.c), or rows of a few key orders (`_c_grouped`). It
        reads the block exactly as `_uniform_rows` / `_grouped_rows` would, or declines
        having changed nothing (False; also when the extension is not built or USE_C is
        off): the Python ways then read the block and decide every error and message.
        `data[:end]` is whole lines; `nl`: what `_load_line` adds back to a line for its
        message (b"\n" for `parse_file`'s blocks, b"" for `feed`)."""
        module = _c_module() if USE_C else None
        if module is None:
            return False
        first_end = data.find(b"\n", 0, end)
        if first_end < 0:
            return False
        raw = data[:first_end]
        if b'"series"' in raw or b'"event"' in raw:  # as `_uniform_rows` declines
            return False
        keys = _row_keys(raw)
        if keys is None:
            return False
        written = _written_keys(keys)
        if written is None:
            return False
        out = module.rows(data, end, written)
        if out is None:
            return False
        if isinstance(out, int):  # a line of another key order, at byte `out`
            return self._c_grouped(module, data, end, nl, keys, written, out)
        n = len(out) // (8 * len(keys))
        columns = np.frombuffer(out, dtype=np.float64).reshape(len(keys), n)
        start = self.line + 1
        self.line += n
        rows = _BlockRows(data, end, start, nl, self._load_line)
        group = _Group(rows, range(start, start + n), rows)  # type: ignore[arg-type]
        with _gc_paused():
            self._row_group(keys, group, columns.T, from_c=True)
        return True

    def _c_grouped(
        self, module: Any, data: bytes, end: int, nl: bytes, keys: tuple[str, ...],
        written: tuple[bytes, ...], at: int,
    ) -> bool:
        """Rows of a few key orders (a trainer's train and eval rows, miles' train and
        rollout rows) read by `_rows.grouped`, one table per key order, handed to
        `_row_group` in the order `_grouped_rows` would (by each order's first line).
        The key orders come from the block's lines as orjson reads them, one at a time
        where C meets a line of an order it was not given (`at`: its byte offset), and are
        kept for the next blocks. False, having changed nothing, when C declines, a line
        of a new order is not a plain row (`_grouped_rows` would decline it too), or the
        orders are too many."""
        tables = self._c_tables
        tables.setdefault(keys, written)
        given = False  # whether C was given every key order in `tables` yet
        while True:
            raw = data[at : data.find(b"\n", at, end)]
            other = _row_keys(raw)
            if other is None:
                return False
            if other in tables:
                if given:  # its keys are written another way (escapes): not C's
                    return False
            else:
                other_written = _written_keys(other)
                if other_written is None or len(tables) >= _C_MAX_KEY_ORDERS:
                    return False
                tables[other] = other_written
            out = module.grouped(data, end, tuple(tables.values()))
            given = True
            if out is None:
                return False
            if not isinstance(out, int):
                break
            at = out
        start = self.line + 1
        found = sorted(
            (first, keys, lines, values)
            for (keys, _), (first, lines, values) in zip(tables.items(), out, strict=True)
            if first >= 0
        )
        self.line += sum(len(lines) for _, _, lines, _ in found) // 8  # every line is a row
        with _gc_paused():
            for _, keys, lines_bytes, values in found:
                index = np.frombuffer(lines_bytes, dtype=np.int64)
                table = np.frombuffer(values, dtype=np.float64).reshape(len(index), len(keys))
                rows = _BlockRows(data, end, start, nl, self._load_line, index.tolist())
                lines = (index + start).tolist()
                self._row_group(keys, _Group(rows, lines, rows), table,  # type: ignore[arg-type]
                                from_c=True)
        return True

    def parse_lines(self, pieces: list[bytes], *, quotes: int | None = None) -> None:
        """Parse whole lines (with or without their newline), in file order. `quotes` is
        given by `parse_file` for lines it split off at their newlines: how many '"' they
        hold, counted at once.

        A block is tried by the fast ways in turn: rows of one key order read line by
        line into one table, each line's objects dropped as soon as its values are taken
        (`_uniform_rows`); rows of a few key orders, one table each (`_grouped_rows`);
        record lines converted one at a time (`_records_one_by_one`). A fast way changes
        nothing until its whole block has converted; on anything unusual the block is
        parsed whole by `_parse_lines`, which decides every error and its message. They
        end in the same conversions (`_row_group`, `_convert_record`), so a block gives
        the same columns, points and errors whichever way it was read
        (docs/jsonl-reading.md; tests/sources/test_jsonl_rows_fast.py)."""
        with _gc_paused():
            done = self._uniform_rows(pieces, quotes)
            if done or (done is None and self._grouped_rows(pieces, quotes)):
                return
            if quotes is not None:  # the lines as the file holds them, for messages
                pieces = [p + b"\n" for p in pieces]
            if not self._records_one_by_one(pieces):
                self._parse_lines(pieces)

    def _records_one_by_one(self, pieces: list[bytes]) -> bool:
        """A block of record lines that share one key order, converted a line at a time so
        only one line's objects are alive (a 100k-point series is ~14 MB of them). Nothing
        is kept until the whole block has converted: on anything else (another key order,
        a line that is not an object, a record error) it returns False having changed
        nothing, and `_parse_lines` reads the block and decides which error comes first.
        A line that is not JSON is the block's first error either way: it is raised here,
        as `_parse_lines` would (bare NaN/Infinity lines are read as there)."""
        if not pieces or b'"series"' not in pieces[0]:
            return False
        start = self.line + 1
        keys: tuple[str, ...] | None = None
        done: list[_Converted] = []
        for k, raw in enumerate(pieces):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                if not raw.strip():
                    continue
                obj = self._fallback_loads(raw, start + k, exc)
            if type(obj) is not dict:
                return False
            if keys is None:
                keys = tuple(obj)
                if not ("metric" in obj and "series" in obj):
                    return False
            elif tuple(obj) != keys:
                return False
            try:
                done.append(self._convert_record(obj, start + k, raw))
            except RecordError:
                return False
            del obj
        self.line += len(pieces)
        for conv in done:
            self._commit_record(conv)
        return True

    def _uniform_rows(self, pieces: list[bytes], quotes_in: int | None) -> bool | None:
        """The fast way through a block of rows that share one key order (see
        `parse_lines`). Having changed nothing, it returns None when a line is a row with
        another key order (`_grouped_rows` may do), False when the block is anything else."""
        if len(pieces) < 2 or b'"series"' in pieces[0] or b'"event"' in pieces[0]:
            return False  # record lines and end markers: the whole-block path
        loads = orjson.loads
        start, nl = self.line + 1, b"" if quotes_in is None else b"\n"
        try:
            first = self._load_line(pieces[0], start, nl)  # its error: the block's first
        except _Unusual:
            return False
        if type(first) is not dict or not first:
            return False
        keys = tuple(first)
        if ("metric" in first and "series" in first) or "event" in first:
            return False
        quotes = key_quotes(keys)
        if quotes < 0:
            return False

        def values(raw: bytes, line: int) -> Any:
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                obj = self._load_line(raw, line, nl)
            if type(obj) is not dict:
                raise TypeError
            if tuple(obj) != keys:
                raise _NotUniform
            return obj.values()

        width, n = len(keys), len(pieces)
        try:
            flat = np.fromiter(
                chain.from_iterable(map(values, pieces, count(start))), dtype=np.float64,
                count=width * n,
            )
        except _NotUniform:
            return None
        except (_Unusual, TypeError, ValueError, OverflowError):  # not RecordError
            return False
        # numpy parses any string ("0.5" too): only markers may be among the values. A row
        # holds at least its keys' quotes, so equal totals mean no row holds a string.
        total = quotes_in if quotes_in is not None else sum(
            map(bytes.count, pieces, repeat(b'"'))
        )
        if total != quotes * n and not all(
            raw.count(b'"') == quotes
            or only_marker_strings(self._load_line(raw, line, nl).values())
            for raw, line in zip(pieces, count(start))
        ):
            return False
        self.line += n
        rows = _LazyRows(pieces, start, nl, self._load_line)
        group = _Group(rows, range(start, start + n), pieces)  # type: ignore[arg-type]
        self._row_group(keys, group, flat.reshape(n, width))
        return True

    def _grouped_rows(self, pieces: list[bytes], quotes_in: int | None) -> bool:
        """A block of rows of a few key orders (a trainer's train rows and eval rows, miles'
        train and rollout rows): each line's values go to its key order's list as it is
        parsed, and each key order becomes one table, in the order `_parse_lines` groups
        them. False, having changed nothing, when anything is unusual (see `parse_lines`)."""
        loads = orjson.loads
        start, nl = self.line + 1, b"" if quotes_in is None else b"\n"
        groups: dict[tuple[str, ...], tuple[list[Any], list[int]]] = {}
        try:
            for k, raw in enumerate(pieces):
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError:
                    obj = self._load_line(raw, start + k, nl)
                if type(obj) is not dict:
                    return False
                keys = tuple(obj)
                group = groups.get(keys)
                if group is None:
                    if not keys or ("metric" in obj and "series" in obj) or "event" in obj:
                        return False
                    if key_quotes(keys) < 0:
                        return False
                    group = groups[keys] = ([], [])
                group[0].extend(obj.values())
                group[1].append(k)
        except _Unusual:
            return False
        del obj
        total = quotes_in if quotes_in is not None else sum(
            map(bytes.count, pieces, repeat(b'"'))
        )
        if total != sum(key_quotes(keys) * len(g[1]) for keys, g in groups.items()) and not all(
            pieces[i].count(b'"') == key_quotes(keys)
            or only_marker_strings(self._load_line(pieces[i], start + i, nl).values())
            for keys, (_, at) in groups.items()
            for i in at
        ):
            return False
        tables = []
        try:
            for keys, (vals, at) in groups.items():
                flat = np.fromiter(vals, dtype=np.float64, count=len(vals))
                tables.append(flat.reshape(len(at), len(keys)))
                vals.clear()
        except (TypeError, ValueError, OverflowError):
            return False
        self.line += len(pieces)
        for (keys, (_, at)), table in zip(groups.items(), tables, strict=True):
            raws = [pieces[i] for i in at]
            lines = [start + i for i in at]
            rows = _LazyRows(raws, lines, nl, self._load_line)
            self._row_group(keys, _Group(rows, lines, raws), table)  # type: ignore[arg-type]
        return True

    def _parse_lines(self, pieces: list[bytes]) -> None:
        # The hot loop does only what must be per line: parse. Line numbers, classifying
        # lines and grouping rows by key set are worked out afterwards, per key set.
        start = self.line + 1
        objs: list[Any] = []
        blanks: list[int] = []
        append = objs.append
        loads = orjson.loads
        for raw in pieces:
            try:
                append(loads(raw))
            except orjson.JSONDecodeError as exc:
                line = start + len(objs) + len(blanks)
                if raw.strip():
                    append(self._fallback_loads(raw, line, exc))
                else:
                    blanks.append(line)
        self.line += len(pieces)
        if not objs:
            return
        lines: Sequence[int] = range(start, start + len(objs))
        raws: Sequence[bytes] = pieces
        if blanks:
            skip = set(blanks)
            lines = [n for n in range(start, start + len(pieces)) if n not in skip]
            raws = [pieces[n - start] for n in lines]
        if set(map(type, objs)) != {dict}:
            i = next(i for i, o in enumerate(objs) if type(o) is not dict)
            raise RecordError(
                f"expected a JSON object per line, got {type(objs[i]).__name__}",
                file=self.path,
                line=lines[i],
            )
        keys = list(map(tuple, objs))
        if len(set(keys)) == 1:
            self._dispatch(keys[0], _Group(objs, list(lines), list(raws)))
            return
        groups: dict[tuple[str, ...], _Group] = {}
        for key, obj, line, raw in zip(keys, objs, lines, raws, strict=True):
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            group.rows.append(obj)
            group.lines.append(line)
            group.raws.append(raw)
        for key, group in groups.items():
            self._dispatch(key, group)

    def _load_line(self, raw: bytes, line: int, nl: bytes) -> Any:
        """One line of a fast way's block, read again as `_parse_lines` reads it (`nl`: the
        newline `parse_file` split off): a bare NaN line is read with `json`, any other
        error is the line's error, word for word. A blank line: `_Unusual`."""
        raw += nl
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if not raw.strip():
                raise _Unusual from None
            return self._fallback_loads(raw, line, exc)

    def _fallback_loads(self, raw: bytes, line: int, exc: orjson.JSONDecodeError) -> Any:
        """Python's json writes bare NaN/Infinity, which orjson rejects; only such lines
        are re-read with `json` (strict UTF-8, no lone surrogates, no out-of-range number,
        no unbounded recursion). Any other orjson error is the line's error."""
        if b"NaN" not in raw and b"Infinity" not in raw:
            # orjson counts lines and columns within this one line: say "byte" instead
            why = re.sub(r": line 1 column \d+ \(char (\d+)\)$", r" at byte \1 of the line",
                         str(exc))
            why = why.replace(
                "number is infinity when parsed as double", "a number out of range of a float64"
            )
            raise self._not_json(raw, line, why)
        try:
            text = raw.decode("utf-8")
            if _SURROGATE_ESCAPE.search(raw):
                raise ValueError("a \\u escape of a lone surrogate is not text")
            return json.loads(text, parse_float=finite_float, parse_int=int_text)
        except UnicodeDecodeError as err:
            raise self._not_json(raw, line, f"not UTF-8 at byte {err.start} of the line") from None
        except RecursionError:
            raise self._not_json(raw, line, "nested too deeply") from None
        except ValueError as err:
            raise self._not_json(raw, line, str(err)) from None

    def _not_json(self, raw: bytes, line: int, why: str) -> RecordError:
        return RecordError(
            f"not valid JSON ({why}): {quote(raw[:60].decode('utf-8', 'replace'))}",
            file=self.path,
            line=line,
        )

    def _dispatch(self, keys: tuple[str, ...], group: _Group) -> None:
        if "metric" in keys and "series" in keys:
            for obj, line, raw in zip(group.rows, group.lines, group.raws, strict=True):
                self._record_line(obj, line, raw)
        elif "event" in keys and set(keys) <= EVENT_KEYS:
            for obj, line in zip(group.rows, group.lines, strict=True):
                self.events.append({**obj, "line": line})
        else:
            self._row_group(keys, group)

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

    def _record_line(self, obj: dict[str, Any], line: int, raw: bytes) -> None:
        self._commit_record(self._convert_record(obj, line, raw))

    def _commit_record(self, conv: _Converted) -> None:
        self.record_metrics.add(conv.metric)
        if conv.null_step is not None:
            self.metric_errors.setdefault(conv.metric, conv.null_step)
        self._add(conv.metric, conv.step_key, conv.steps, conv.values)

    def _convert_record(self, obj: dict[str, Any], line: int, raw: bytes) -> _Converted:
        """A record line's series as arrays; changes nothing on the parser."""
        metric, series = obj["metric"], obj["series"]
        if not isinstance(metric, str) or not metric:
            raise RecordError(
                f'"metric" must be a non-empty string, got {quote(metric)}',
                file=self.path,
                line=line,
            )
        if not isinstance(series, list):
            raise RecordError(
                f'"series" of {quote(metric)} must be a list of [step, value] pairs, got '
                f"{quote(series)}",
                file=self.path,
                line=line,
            )
        step_key = obj.get("step_key", None)
        if step_key is None:
            step_key = default_step_key(metric, self.step_aliases)
        elif not isinstance(step_key, str) or not step_key:
            raise RecordError(
                f'"step_key" of {quote(metric)} must be a non-empty string (the step axis, e.g. '
                f'"train/step"), got {quote(step_key)}',
                file=self.path,
                line=line,
            )
        # The series holds a string only if the line has more '"' than its keys and its
        # other fields account for; then only the slow path may judge it.
        flat = None
        if raw.count(b'"') == record_quotes(obj) or only_marker_strings(
            v for p in series if isinstance(p, list) for v in p
        ):
            flat = fast_floats(series, 2, check_shape=True)
        if flat is not None and np.isnan(flat[0::2]).any():
            flat = None  # a null step: the slow path makes it an error on this metric only
        null_step = None
        if flat is not None:
            # copies: a strided view would keep the whole interleaved buffer alive
            steps = as_steps(
                flat[0::2], lambda: [p[0] for p in series], self.path, Same(line),
                lambda i: f"series point {i} of {quote(metric)}: step",
            )
            values = flat[1::2].copy()
        else:
            steps, values, null_step = self._slow_series(metric, series, line)
        return _Converted(metric, step_key, steps, values, null_step)

    def _slow_series(
        self, metric: str, series: list[Any], line: int
    ) -> tuple[np.ndarray, np.ndarray, str | None]:
        """Point-by-point conversion, for series with markers or malformed points; and why
        the metric cannot be judged (its first null step), if it cannot."""
        steps_l, values_l = [], []
        null_step = None
        for i, point in enumerate(series):
            if not isinstance(point, list) or len(point) != 2:
                raise RecordError(
                    f"series point {i} of {quote(metric)} is not [step, value]: got {quote(point)}",
                    file=self.path,
                    line=line,
                )
            if point[0] is None:
                # miles' capture writes the step it was given; `tracking.log(..., step=None)`
                # leaves null, and miles' own gate then fails that metric only
                null_step = null_step or (
                    f"series point {i} has a null step ({self.path}:{line}); "
                    "a point without a step cannot be judged"
                )
                continue
            what = f"series point {i} of {quote(metric)}"
            steps_l.append(step_of(point[0], self.path, line, f"{what}: step"))
            values_l.append(coerce_value(point[1], self.path, line, what))
        steps, values = np.array(steps_l, dtype=STEP_DTYPE), np.array(values_l, dtype=VALUE_DTYPE)
        return steps, values, null_step

    def _row_group(
        self, keys: tuple[str, ...], group: _Group, table: np.ndarray | None = None,
        *, from_c: bool = False,
    ) -> None:
        """The metrics of rows of one key order, from their `table` when a fast way made
        one. `from_c`: the table is `_rows`' output, so no value in it was true or false;
        when it is column-major (`rows`, not `grouped`) its columns are kept as they are,
        views of one buffer, with no copy."""
        index = {k: i for i, k in enumerate(keys)}
        if table is None and self._no_strings_but_markers(keys, group):
            flat = fast_floats(list(map(dict.values, group.rows)), len(keys))
            table = flat.reshape(len(group.rows), len(keys)) if flat is not None else None
        rows = [list(r.values()) for r in group.rows] if table is None else []
        columns: dict[int, np.ndarray] = {}

        def column(j: int) -> np.ndarray:
            if table is not None:
                return table[:, j]
            if j not in columns:
                columns[j] = np.array(
                    [
                        coerce_value(row[j], self.path, ln, f"field {quote(keys[j])}")
                        for row, ln in zip(rows, group.lines, strict=True)
                    ],
                    dtype=np.float64,
                )
            return columns[j]

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
                steps = self._row_steps(step_key, index[step_key], group, table, from_c)
                step_columns[step_key] = steps
            # C's column-major table: its columns are contiguous, a view keeps no more alive
            values = (
                column(j) if from_c and table is not None and table.flags.f_contiguous
                else np.array(column(j), dtype=VALUE_DTYPE)
            )
            self._add(key, step_key, steps, values)

    @staticmethod
    def _no_strings_but_markers(keys: tuple[str, ...], group: _Group) -> bool:
        """Whether every string among the rows' values is a marker: rows whose bytes hold
        no more '"' than their keys take hold none; only the others are looked at."""
        expected = key_quotes(keys)
        return all(
            raw.count(b'"') == expected or only_marker_strings(row.values())
            for raw, row in zip(group.raws, group.rows, strict=True)
        )

    def _row_steps(
        self, key: str, j: int, group: _Group, table: np.ndarray | None, from_c: bool = False
    ) -> np.ndarray:
        if table is not None:
            return as_steps(
                table[:, j], lambda: _Field(group.rows, key), self.path, group.lines,
                lambda i: f"step field {quote(key)}", bools=not from_c,
            )
        return np.array(
            [step_of(r[key], self.path, ln, f"step field {quote(key)}")
             for r, ln in zip(group.rows, group.lines, strict=True)],
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


@functools.lru_cache(maxsize=64)
def _row_keys(raw: bytes) -> tuple[str, ...] | None:
    """The key order of a line that is a plain row, as orjson reads it: None for a line
    that is not JSON, not a non-empty object, a record line or an end marker."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or not obj or "event" in obj or ("metric" in obj and "series" in obj):
        return None
    return tuple(obj)


def _written_keys(keys: tuple[str, ...]) -> tuple[bytes, ...] | None:
    """The keys of a row as orjson writes them, quotes included, for `_rows` to match
    byte for byte (a key written with escapes otherwise declines its block); None when a
    key holds '"' (`key_quotes` cannot count it, and `_uniform_rows` declines too) or
    cannot be written (a lone surrogate)."""
    if key_quotes(keys) < 0:
        return None
    try:
        return tuple(map(orjson.dumps, keys))
    except orjson.JSONEncodeError:
        return None


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
            if parser.parse_block(data, cut):  # rows of one key order, read in C
                continue
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
