"""JSONL metric records: the miles metric-history form and per-step rows, parsed into numpy.

Two line shapes, detected per line, so files and directories may mix them:

- record:  {"metric": "train/ppo_kl", "series": [[0, 1e-10], [1, 0.0003]]}
- row:     {"train/step": 3, "train/loss": 0.41}  /  {"step": 3, "loss": 0.41}
- event:   {"event": "end", "state": "finished"}  (optional end-of-run marker)

Non-finite values may be the strings "NaN", "Infinity", "-Infinity" or the bare tokens
Python's json module writes. Lines are parsed with orjson; rows that share one key set
are converted to numpy together, so no Python object per point outlives its line.
"""

from __future__ import annotations

import gc
import json
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from gatekeeper.errors import RecordError
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


def _coerce(value: Any, path: str, line: int, what: str) -> float:
    if isinstance(value, (int, float)):  # bool is an int: logged flags judge as 0/1
        return float(value)
    if isinstance(value, str):
        marker = _MARKERS.get(value.strip().lower())
        if marker is not None:
            return marker
    raise RecordError(
        f"{what}: expected a number or one of \"NaN\", \"Infinity\", \"-Infinity\", "
        f"got {_show(value)}",
        file=path,
        line=line,
    )


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
    errors naming the line. numpy's C loop parses the marker strings ("NaN", "Infinity")
    itself; a NaN in the result is checked against the input, because numpy also turns a
    JSON null into NaN, and null is not a value."""
    if check_shape and (set(map(type, items)) != {list} or set(map(len, items)) != {width}):
        return None
    try:
        flat = np.fromiter(chain.from_iterable(items), dtype=np.float64, count=width * len(items))
    except (TypeError, ValueError, OverflowError):
        return None
    for i in np.flatnonzero(np.isnan(flat)).tolist():
        v = list(items[i // width])[i % width]
        if not (isinstance(v, float) or (isinstance(v, str) and v.strip().lower() in _MARKERS)):
            return None
    return flat


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_steps(col: np.ndarray, path: str, lines: list[int], key: str) -> np.ndarray:
    if col.dtype.kind in "iu":
        return col.astype(STEP_DTYPE, copy=False)
    bad = ~np.isfinite(col) | (col != np.floor(col))
    if bad.any():
        i = int(np.argmax(bad))
        raise RecordError(
            f"step field {key!r} must be a whole number, got {col[i]!r}", file=path, line=lines[i]
        )
    return col.astype(STEP_DTYPE)


@dataclass
class _Group:
    rows: list[Any] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


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
            f"{_show(tail[:40].decode('utf-8', 'replace'))}); the file was cut off "
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
            except orjson.JSONDecodeError:
                line = start + len(objs) + len(blanks)
                if raw.strip():
                    append(self._fallback_loads(raw, line))
                else:
                    blanks.append(line)
        self.line += len(pieces)
        if not objs:
            return
        lines: Sequence[int] = range(start, start + len(objs))
        if blanks:
            skip = set(blanks)
            lines = [n for n in range(start, start + len(pieces)) if n not in skip]
        if set(map(type, objs)) != {dict}:
            i = next(i for i, o in enumerate(objs) if type(o) is not dict)
            raise RecordError(
                f"expected a JSON object per line, got {type(objs[i]).__name__}",
                file=self.path,
                line=lines[i],
            )
        keys = list(map(tuple, objs))
        if len(set(keys)) == 1:
            self._dispatch(keys[0], _Group(objs, list(lines)))
            return
        groups: dict[tuple[str, ...], _Group] = {}
        for key, obj, line in zip(keys, objs, lines):
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            group.rows.append(obj)
            group.lines.append(line)
        for key, group in groups.items():
            self._dispatch(key, group)

    def _fallback_loads(self, raw: bytes, line: int) -> Any:
        try:
            return json.loads(raw)  # Python's json writes bare NaN/Infinity, orjson rejects them
        except (ValueError, UnicodeDecodeError) as exc:
            raise RecordError(
                f"not valid JSON ({exc}): {_show(raw[:60].decode('utf-8', 'replace'))}",
                file=self.path,
                line=line,
            ) from None

    def _dispatch(self, keys: tuple[str, ...], group: _Group) -> None:
        if "metric" in keys and "series" in keys:
            for obj, line in zip(group.rows, group.lines):
                self._record_line(obj, line)
        elif "event" in keys and set(keys) <= EVENT_KEYS:
            for obj, line in zip(group.rows, group.lines):
                self.events.append({**obj, "line": line})
        else:
            self._row_group(keys, group)

    def _add(self, metric: str, step_key: str, steps: np.ndarray, values: np.ndarray) -> None:
        known = self.step_keys.setdefault(metric, step_key)
        if known != step_key:
            raise RecordError(
                f"metric {metric!r} is logged against step field {step_key!r} here but "
                f"against {known!r} earlier; a metric must stay on one step axis",
                file=self.path,
                line=self.line,
            )
        self.chunks.setdefault(metric, []).append((steps, values))

    def _record_line(self, obj: dict[str, Any], line: int) -> None:
        metric, series = obj["metric"], obj["series"]
        if not isinstance(metric, str) or not metric:
            raise RecordError(
                f'"metric" must be a non-empty string, got {_show(metric)}', file=self.path, line=line
            )
        if not isinstance(series, list):
            raise RecordError(
                f'"series" of {metric!r} must be a list of [step, value] pairs, got '
                f"{_show(series)}",
                file=self.path,
                line=line,
            )
        step_key = obj.get("step_key") or default_step_key(metric, self.step_aliases)
        self.record_metrics.add(metric)
        flat = _fast_floats(series, 2, check_shape=True)
        if flat is not None:
            # copies: a strided view would keep the whole interleaved buffer alive
            steps_f, values = flat[0::2], flat[1::2].copy()
        else:
            steps_f, values = self._slow_series(metric, series, line)
        steps = _as_steps(steps_f, self.path, [line] * len(steps_f), f"series of {metric}")
        self._add(metric, step_key, steps, values)

    def _slow_series(self, metric: str, series: list[Any], line: int) -> tuple[np.ndarray, np.ndarray]:
        """Point-by-point conversion, for series with markers or malformed points."""
        steps_l, values_l = [], []
        for i, point in enumerate(series):
            if not isinstance(point, list) or len(point) != 2:
                raise RecordError(
                    f"series point {i} of {metric!r} is not [step, value]: got {_show(point)}",
                    file=self.path,
                    line=line,
                )
            if point[0] is None:
                # miles' capture writes the step it was given; `tracking.log(..., step=None)`
                # leaves null, and miles' own gate then fails that metric only
                self.metric_errors.setdefault(
                    metric,
                    f"series point {i} has a null step ({self.path}:{line}); "
                    "a point without a step cannot be judged",
                )
                continue
            if not isinstance(point[0], (int, float)) or isinstance(point[0], bool):
                raise RecordError(
                    f"series point {i} of {metric!r}: step must be a number, got {_show(point[0])}",
                    file=self.path,
                    line=line,
                )
            steps_l.append(point[0])
            values_l.append(_coerce(point[1], self.path, line, f"series point {i} of {metric!r}"))
        return np.array(steps_l, dtype=np.float64), np.array(values_l, dtype=VALUE_DTYPE)

    def _row_group(self, keys: tuple[str, ...], group: _Group) -> None:
        index = {k: i for i, k in enumerate(keys)}
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
                        _coerce(row[j], self.path, ln, f"field {keys[j]!r}")
                        for row, ln in zip(rows, group.lines)
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
                    f"no step field for metric {key!r}: a row needs \"step\", \"_step\" or "
                    f"\"{default_step_key(key, self.step_aliases)}\"",
                    file=self.path,
                    line=group.lines[0],
                )
            steps = step_columns.get(step_key)
            if steps is None:
                steps = _as_steps(column(index[step_key]), self.path, group.lines, step_key)
                step_columns[step_key] = steps
            self._add(key, step_key, steps, np.array(column(j), dtype=VALUE_DTYPE))

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
    with open(parser.path, "rb") as fh:
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
    """The record files of a run directory, in a stable order."""
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    return [os.path.join(directory, n) for n in names]
