"""JSONL metric records: the miles metric-history form and per-step rows, parsed into numpy.

Two line shapes, detected per line, so files and directories may mix them:

- record:  {"metric": "train/ppo_kl", "series": [[0, 1e-10], [1, 0.0003]]}
- row:     {"train/step": 3, "train/loss": 0.41}  /  {"step": 3, "loss": 0.41}
- event:   {"event": "end", "state": "finished"}  (optional end-of-run marker)

Non-finite values may be the strings "NaN", "Infinity", "-Infinity" or the bare tokens
Python's json module writes; a null value is a non-finite point too (DESIGN: a null where
a metric has numbers elsewhere). Lines are parsed with orjson; rows that share one key
set are converted to numpy together, so no Python object per point outlives its line.

What is refused, always and on every path (fast and slow), with file:line: a step that is
not a whole number fitting int64 (a bool, a string, 1e300, 2**63); a value that is neither
a number, null nor a marker (a numeric string such as "0.5" included); a number too large
for a float; a line nested deeper than orjson's 1024 levels; text that is not UTF-8.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from typing import IO, Any

import numpy as np
import orjson

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import STEP_DTYPE, VALUE_DTYPE, Series, merge_chunks

BLOCK_SIZE = 8 << 20
# miles logs perf/* against rollout/step; other namespaces use "<ns>/step".
DEFAULT_STEP_ALIASES: dict[str, str] = {"perf": "rollout/step"}
EVENT_KEYS = frozenset({"event", "state", "time", "message", "reason"})
_MARKERS = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}


def is_step_key(key: str) -> bool:
    return key in ("step", "_step") or key.endswith("/step")


def default_step_key(metric: str, aliases: dict[str, str] | None = None) -> str:
    """The axis a metric of a record line lives on: `<ns>/step`, an alias, or `step`."""
    aliases = DEFAULT_STEP_ALIASES if aliases is None else aliases
    ns, sep, _ = metric.partition("/")
    if not sep:
        return "step"
    return aliases.get(ns, f"{ns}/step")


STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1
_EXACT = 2.0**53  # beyond this a float64 step may stand for another whole number
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _coerce(value: Any, path: str, line: int, what: str) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, int):  # bool is an int: logged flags judge as 0/1
        try:
            return float(value)
        except OverflowError:
            raise RecordError(
                f"{what}: number {quote(value)} is out of range of a float64", file=path, line=line
            ) from None
    if value is None:
        return math.nan  # a null point is non-finite: an error at its step, never a pass
    if isinstance(value, str):
        marker = _MARKERS.get(value.strip().lower())
        if marker is not None:
            return marker
    raise RecordError(
        f"{what}: expected a number, null or one of \"NaN\", \"Infinity\", \"-Infinity\", "
        f"got {quote(value)}"
        + (" (a number in a string is not a number)" if _numeric(value) else ""),
        file=path,
        line=line,
    )


def _numeric(value: Any) -> bool:
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def step_of(value: Any, path: str, line: int, what: str) -> int:
    """A step as written: a whole number that fits int64 (3 and 3.0; not true, "3", 1e300)."""
    if isinstance(value, int) and not isinstance(value, bool) and STEP_MIN <= value <= STEP_MAX:
        return value
    # A float step must be exact: beyond 2**53 it may stand for another whole number (and
    # orjson reads an integer below -2**63 as the float -2**63: INT64_MIN, wrongly).
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    raise RecordError(
        f"{what} must be a whole number that fits int64 (-2**63 .. 2**63-1; written with a "
        f"fraction or exponent, within 2**53), got {quote(value)}",
        file=path,
        line=line,
    )


def open_regular(path: str, error: Callable[[str], Exception] | None = None) -> IO[bytes]:
    """Open `path` for reading only if it is a regular file: a FIFO would block forever and
    a device such as /dev/zero never ends. Non-blocking open, then fstat: no race."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else (
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a directory" if stat.S_ISDIR(mode) else "a socket or special file"
            )
            message = f"is {kind}, not a regular file; only regular files are read"
            raise (error(message) if error else RecordError(message, file=path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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


def _fast_floats(items: list[Any], width: int, *, check_shape: bool = False) -> np.ndarray | None:
    """All values of `items` (lists of `width` values) as one flat float64 array, or None
    when anything is not a plain number — the caller then converts value by value, with
    errors naming the line. numpy turns null into NaN (as it should: a null point is
    non-finite) but also parses any string ("0.5", "1_000"): callers only come here when
    the line's bytes show that no string is among the values, or after checking that
    every string there is a marker."""
    if check_shape and (set(map(type, items)) != {list} or set(map(len, items)) != {width}):
        return None
    try:
        flat = np.fromiter(chain.from_iterable(items), dtype=np.float64, count=width * len(items))
    except (TypeError, ValueError, OverflowError):
        return None
    return flat


def _only_marker_strings(values: Any) -> bool:
    return all(not isinstance(v, str) or v.strip().lower() in _MARKERS for v in values)


def _as_steps(
    col: np.ndarray, originals: Callable[[], Sequence[Any]], path: str,
    lines: Sequence[int] | _Same, what: Callable[[int], str],
) -> np.ndarray:
    """A float64 step column as int64 — exactly. Where the floats cannot be trusted (0 and
    1 may have been true/false; beyond 2**53 a float may stand for another whole number;
    NaN, fractions, out of int64 range), the written values decide, point by point."""
    if col.dtype.kind in "iu":
        return col.astype(STEP_DTYPE, copy=False)
    doubt = (col == 0) | (col == 1) | ~(np.abs(col) < _EXACT) | (col != np.floor(col))
    if not doubt.any():
        return col.astype(STEP_DTYPE)
    out = np.where(doubt, 0.0, col).astype(STEP_DTYPE)
    raw = originals()
    for i in np.flatnonzero(doubt).tolist():
        out[i] = step_of(raw[i], path, lines[i], what(i))
    return out


@dataclass
class _Group:
    rows: list[Any] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)  # the lines as read, for their quotes


def _key_quotes(keys: Sequence[str]) -> int:
    """How many '"' bytes the keys of a line take, or -1 when that cannot be told from the
    text (a quote inside a key may be written `\\"` or `\\u0022`)."""
    if any('"' in k for k in keys):
        return -1
    return 2 * len(keys)


def _record_quotes(obj: dict[str, Any]) -> int:
    """The '"' bytes a record line takes outside its series (-1: cannot tell)."""
    n = _key_quotes(list(obj))
    for key, v in obj.items():
        if key == "series" or v is None or isinstance(v, (int, float)):
            continue
        if not isinstance(v, str) or '"' in v:
            return -1
        n += 2
    return n


class _Same:
    """A sequence that is one value at every index (the line of every point of a record)."""

    def __init__(self, value: int):
        self.value = value

    def __getitem__(self, i: int) -> int:
        return self.value


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range of a float64")
    return value


def _int(text: str) -> int:
    return int(text)  # Python refuses > 4300 digits itself (a ValueError, reported)


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

    def parse_lines(self, pieces: list[bytes]) -> None:
        """Parse whole lines (with or without their newline), in file order."""
        with _gc_paused():
            self._parse_lines(pieces)

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
            return json.loads(text, parse_float=_finite_float, parse_int=_int)
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
        self.chunks.setdefault(metric, []).append((steps, values))

    def _record_line(self, obj: dict[str, Any], line: int, raw: bytes) -> None:
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
        if raw.count(b'"') == _record_quotes(obj) or _only_marker_strings(
            v for p in series if isinstance(p, list) for v in p
        ):
            flat = _fast_floats(series, 2, check_shape=True)
        if flat is not None:
            # copies: a strided view would keep the whole interleaved buffer alive
            steps = _as_steps(
                flat[0::2], lambda: [p[0] for p in series], self.path, _Same(line),
                lambda i: f"series point {i} of {quote(metric)}: step",
            )
            values = flat[1::2].copy()
        else:
            steps, values = self._slow_series(metric, series, line)
        self._add(metric, step_key, steps, values)

    def _slow_series(
        self, metric: str, series: list[Any], line: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Point-by-point conversion, for series with markers or malformed points."""
        steps_l, values_l = [], []
        for i, point in enumerate(series):
            if not isinstance(point, list) or len(point) != 2:
                raise RecordError(
                    f"series point {i} of {quote(metric)} is not [step, value]: got {quote(point)}",
                    file=self.path,
                    line=line,
                )
            what = f"series point {i} of {quote(metric)}"
            steps_l.append(step_of(point[0], self.path, line, f"{what}: step"))
            values_l.append(_coerce(point[1], self.path, line, what))
        return np.array(steps_l, dtype=STEP_DTYPE), np.array(values_l, dtype=VALUE_DTYPE)

    def _row_group(self, keys: tuple[str, ...], group: _Group) -> None:
        index = {k: i for i, k in enumerate(keys)}
        table = None
        if self._no_strings_but_markers(keys, group):
            flat = _fast_floats(list(map(dict.values, group.rows)), len(keys))
            table = flat.reshape(len(group.rows), len(keys)) if flat is not None else None
        rows = [list(r.values()) for r in group.rows] if table is None else []
        columns: dict[int, np.ndarray] = {}

        def column(j: int) -> np.ndarray:
            if table is not None:
                return table[:, j]
            if j not in columns:
                columns[j] = np.array(
                    [
                        _coerce(row[j], self.path, ln, f"field {quote(keys[j])}")
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
                steps = self._row_steps(step_key, index[step_key], group, table)
                step_columns[step_key] = steps
            self._add(key, step_key, steps, np.array(column(j), dtype=VALUE_DTYPE))

    @staticmethod
    def _no_strings_but_markers(keys: tuple[str, ...], group: _Group) -> bool:
        """Whether every string among the rows' values is a marker: rows whose bytes hold
        no more '"' than their keys take hold none; only the others are looked at."""
        expected = _key_quotes(keys)
        return all(
            raw.count(b'"') == expected or _only_marker_strings(row.values())
            for raw, row in zip(group.raws, group.rows, strict=True)
        )

    def _row_steps(
        self, key: str, j: int, group: _Group, table: np.ndarray | None
    ) -> np.ndarray:
        if table is not None:
            return _as_steps(
                table[:, j], lambda: [r[key] for r in group.rows], self.path, group.lines,
                lambda i: f"step field {quote(key)}",
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
    line. With `final`, a last line without its newline is a truncation error."""
    pos = offset
    with open_regular(parser.path) as fh:
        fh.seek(offset)
        while True:
            lines = fh.readlines(BLOCK_SIZE)  # whole lines, read and split in C
            if not lines:
                return pos
            tail = lines[-1]
            if not tail.endswith(b"\n"):
                lines.pop()
                if final and tail.strip():
                    parser.parse_lines(lines)
                    parser._truncated(tail, parser.line + 1)
                parser.parse_lines(lines)
                if final:
                    parser.line += 1
                    return pos + sum(map(len, lines)) + len(tail)
                return pos + sum(map(len, lines))
            parser.parse_lines(lines)
            pos += sum(map(len, lines))


def jsonl_files(directory: str) -> list[str]:
    """The record files of a run directory, in a stable order (each one is checked to be a
    regular file when it is opened: a FIFO named `a.jsonl` is an error, not a hang)."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    return [os.path.join(directory, n) for n in names]
