"""`LiveJsonlSource`: a JSONL record file or run directory followed while it is written.

Three ways a trainer writes JSONL, all followed at O(new data) per poll where the writer
allows it:

- appended (per-step rows, one record line per log call): tailed from a byte offset;
- atomically rewritten (miles writes its record file to a temp file and renames it over
  the old one on every log call): the new file is detected by inode, by shrinking, or by
  the bytes before the offset no longer matching; it is re-read whole (the writer leaves
  no other way) and only the points beyond those already emitted per metric are new;
- a directory of per-process `*.jsonl` files: files are picked up as they appear.

A record metric (the miles form, `{"metric": ..., "series": [[step, value], ...]}`) holds
one point per step: as `check` does (`duplicate_step`), a step logged twice — within a poll,
across polls, or by two files of a run — makes that metric an error. Each record metric's
steps emitted so far are kept as merged [lo, hi] intervals (`_Seen`: one for miles'
contiguous steps), so a poll stays O(its new points).

A source that does not exist yet, and a partially written last line, are not errors:
the poll returns nothing new. The run has ended when every file seen has written its
end marker (`{"event": "end", "state": "finished"}`).

`held` (`run` only): record files that already had content when the watch began hold an
earlier run until the command changes them, as wandb and TensorBoard follow only a run
started after the watch began. Once changed, a file is read from its start: rewritten
(truncated, replaced) its new content is the run; only grown (a resume appending) the
whole file is, as `check` reads it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np

from gatekeeper.errors import SourceError, one_line
from gatekeeper.model import STEP_DTYPE, STEP_MAX, STEP_MIN, Run, RunState, Series, merge_chunks
from gatekeeper.safe_open import open_regular
from gatekeeper.sources.base import LiveSource, Poll, StepTops
from gatekeeper.sources.jsonl.reader import BLOCK_SIZE, JsonlParser
from gatekeeper.sources.jsonl.records import miles_capture
from gatekeeper.sources.jsonl.source import JsonlSource, duplicate_reason, end_state

# 2: + the steps of each record metric already emitted, record metrics, metric errors.
# A version-1 cursor is still read: those steps are recalled from the files once.
_CURSOR_VERSION = 2
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
    # lines of an earlier run this one resumed (appended to): their end marker is not its end
    earlier_lines: int = 0
    # per metric, the highest step this file gave it: a later point below it (a resume
    # from an earlier checkpoint appending to the file) makes the run read again whole
    tops: StepTops = field(default_factory=StepTops)

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "ino": self.ino,
            "dev": self.dev,
            "sig": self.sig,
            "line": self.line,
            "emitted": dict(self.emitted),
            "ended": self.ended.value if self.ended else None,
            "earlier_lines": self.earlier_lines,
            "tops": self.tops.to_json(),
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
            earlier_lines=int(data.get("earlier_lines", 0)),
            # saved before it was kept: unknown, so a step going back right after the
            # restart is not found (from the next point on it is)
            tops=StepTops(data.get("tops")),
        )


@dataclass(frozen=True)
class Held:
    """A record file as it was when the watch began: not read until it changes."""

    ino: int
    dev: int
    size: int
    mtime_ns: int
    sig: str  # hex of the _SIG_BYTES before `size`

    @classmethod
    def of(cls, path: str) -> Held | None:
        """The file now, or None when it is absent or empty (nothing earlier to hold).
        SourceError when it is there but cannot be read: not held, its earlier content
        would be judged as the command's run (a transient error passed for "absent")."""
        try:
            with open_regular(path) as fh:
                st = os.fstat(fh.fileno())
                return cls(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns,
                           _signature(fh, st.st_size)) if st.st_size else None
        except FileNotFoundError:
            return None  # gone since it was listed (or a dangling link): nothing to hold
        except OSError as exc:
            raise _unheld(path, exc) from None

    def change(self, path: str) -> str | None:
        """None while `path` is as held; else "rewritten" or "appended"."""
        try:
            with open_regular(path) as fh:
                st = os.fstat(fh.fileno())
                same = (st.st_ino, st.st_dev) == (self.ino, self.dev)
                if same and (st.st_size, st.st_mtime_ns) == (self.size, self.mtime_ns):
                    return None
                grown = same and st.st_size >= self.size
                return "appended" if grown and _signature(fh, self.size) == self.sig else (
                    "rewritten")
        except FileNotFoundError:
            return None  # between a writer's unlink and rename: the next poll sees it
        except OSError as exc:  # the poll fails (retried) and the file stays held: taken
            # for "rewritten", a transient error would have the earlier run judged as new
            raise _cannot_read(path, exc) from None


def held_files(path: str) -> dict[str, Held]:
    """The record files at `path` (a file, or a directory's `*.jsonl`) with content now."""
    if os.path.isdir(path):
        try:
            names = [n for n in os.listdir(path) if n.endswith(".jsonl") and n[0] != "."]
        except (FileNotFoundError, NotADirectoryError):
            return {}  # removed or replaced since: nothing earlier to hold
        except OSError as exc:
            raise _unheld(path, exc) from None
        paths = [os.path.join(path, n) for n in names]
    else:
        paths = [path]
    return {p: h for p in paths if (h := Held.of(p)) is not None}


def _cannot_read(path: str, exc: OSError, why: str = "") -> SourceError:
    return SourceError(f"{one_line(path)}: cannot read: {exc.strerror or exc}{why}")


def _unheld(path: str, exc: OSError) -> SourceError:
    return _cannot_read(
        path, exc, "; it is there before the command starts, so it must be readable to be "
        "told apart from the command's run (fix it or move it away)"
    )


def _no_steps() -> np.ndarray:
    return np.empty(0, dtype=STEP_DTYPE)


@dataclass
class _Seen:
    """The distinct steps of one record metric emitted so far, as sorted [lo, hi] intervals
    with a gap between any two (miles logs every step: one interval), and the smallest step
    met more than once with its number of points — what `check` reports of the same
    points (`duplicate_step`)."""

    lo: np.ndarray = field(default_factory=_no_steps)
    hi: np.ndarray = field(default_factory=_no_steps)
    dup: tuple[int, int] | None = None  # (step, points at it)

    def add(self, steps: np.ndarray) -> None:
        """Fold a poll's new points of the metric (`steps` sorted); O(len(steps)) while
        they come after the steps already seen, as a writer's do."""
        n = steps.size
        if not n:
            return
        lo, hi = self.lo, self.hi
        first_step, last_step = int(steps[0]), int(steps[-1])
        if (
            (not lo.size or first_step > hi[-1])
            and last_step - first_step == n - 1
            and not (n > 1 and np.any(steps[1:] == steps[:-1]))
        ):  # the usual poll: the next steps, each once (what dup counts is behind them)
            if lo.size and first_step - 1 == hi[-1]:
                hi[-1] = last_step
            else:
                self.lo = np.append(lo, np.array([first_step], dtype=STEP_DTYPE))
                self.hi = np.append(hi, np.array([last_step], dtype=STEP_DTYPE))
            return
        if lo.size and steps[0] <= hi[-1]:
            at = np.searchsorted(lo, steps, side="right") - 1
            known = (at >= 0) & (steps <= hi[np.maximum(at, 0)])
        else:
            known = np.zeros(n, dtype=bool)
        again = np.zeros(n, dtype=bool)
        again[1:] = steps[1:] == steps[:-1]
        if self.dup is not None:  # more points at the step already reported
            self.dup = (self.dup[0], self.dup[1] + _count(steps, self.dup[0]))
        hits = known | again
        if hits.any():
            first = int(np.argmax(hits))  # steps sorted: the smallest step met twice
            step = int(steps[first])
            if self.dup is None or step < self.dup[0]:
                # not met twice before, so at most one earlier point: the one `known`
                self.dup = (step, _count(steps, step) + int(known[first]))
        fresh = steps[~hits]  # distinct, sorted, none seen before
        if not fresh.size:
            return
        cut = np.flatnonzero(fresh[1:] - 1 > fresh[:-1])  # gaps (no overflow: fresh ascends)
        new_lo = fresh[np.concatenate(([0], cut + 1))]
        new_hi = fresh[np.concatenate((cut, [fresh.size - 1]))]
        if not lo.size:
            self.lo, self.hi = new_lo, new_hi
            return
        all_lo, all_hi = np.concatenate((lo, new_lo)), np.concatenate((hi, new_hi))
        if new_lo[0] <= hi[-1]:  # some new steps fall between earlier ones: re-sort
            order = np.argsort(all_lo, kind="stable")
            all_lo, all_hi = all_lo[order], all_hi[order]
            joined = all_lo[1:] - 1 == all_hi[:-1]  # disjoint, so only adjacency merges
        else:  # only the last earlier interval and the first new one can touch
            joined = np.zeros(all_lo.size - 1, dtype=bool)
            joined[lo.size - 1] = new_lo[0] - 1 == hi[-1]
        if joined.any():
            keep = np.flatnonzero(~joined)
            all_lo = all_lo[np.concatenate(([0], keep + 1))]
            all_hi = all_hi[np.concatenate((keep, [all_hi.size - 1]))]
        self.lo, self.hi = all_lo, all_hi

    def to_json(self) -> dict[str, Any]:
        flat = np.empty(2 * self.lo.size, dtype=STEP_DTYPE)
        flat[0::2], flat[1::2] = self.lo, self.hi
        return {"steps": flat.tolist(), "dup": list(self.dup) if self.dup else None}

    @classmethod
    def from_json(cls, data: Any) -> _Seen:
        """Checked: sorted, disjoint, non-adjacent int64 intervals; ValueError if not."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        flat, dup = data.get("steps"), data.get("dup")
        if not isinstance(flat, list) or len(flat) % 2 or not all(_is_int(v) for v in flat):
            raise ValueError('"steps" must be a list of [lo, hi] step pairs, flattened')
        if dup is not None and not (
            isinstance(dup, list) and len(dup) == 2 and all(_is_int(v) for v in dup) and dup[1] >= 2
        ):
            raise ValueError('"dup" must be null or [step, points] with points >= 2')
        try:
            steps = np.array(flat, dtype=STEP_DTYPE)
        except OverflowError:
            raise ValueError('"steps" holds a step outside the int64 range') from None
        lo, hi = steps[0::2].copy(), steps[1::2].copy()
        # sorted and disjoint first; then `lo - hi` > 0 (a wrap is negative, never 1)
        if np.any(lo > hi) or np.any(lo[1:] <= hi[:-1]) or np.any(lo[1:] - hi[:-1] == 1):
            raise ValueError('"steps" intervals must be sorted, disjoint and not adjacent')
        return cls(lo, hi, (int(dup[0]), int(dup[1])) if dup is not None else None)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and STEP_MIN <= value <= STEP_MAX


def _count(steps: np.ndarray, step: int) -> int:
    """Points at `step` in sorted `steps`."""
    return int(np.searchsorted(steps, step, "right") - np.searchsorted(steps, step, "left"))


class LiveJsonlSource(LiveSource):
    """A JSONL run (file or directory, possibly not created yet) followed by cursor."""

    kind = "jsonl"

    def __init__(
        self,
        spec: str,
        step_aliases: dict[str, str] | None = None,
        held: dict[str, Held] | None = None,
    ):
        super().__init__(spec)
        self.held = dict(held or {})  # files of an earlier run, until the command changes them
        self.changed: dict[str, str] = {}  # held file -> "rewritten" or "appended"
        self._whole = JsonlSource(spec, step_aliases)  # reused for `read()` and metadata
        self.path = self._whole.path
        self.step_aliases = step_aliases
        self.tails: dict[str, _Tail] = {}
        self.step_keys: dict[str, str] = {}
        # a null or duplicate step in a record: that metric only; the first reason stands
        self.metric_errors: dict[str, str] = {}
        self.record_metrics: set[str] = set()  # metrics met in record lines (one point a step)
        self.seen: dict[str, _Seen] = {}  # record metric -> its steps emitted so far
        self._recall = False  # a version-1 cursor: rebuild `seen` before the next poll
        self._is_dir = False  # what the last `_files` found the path to be
        # this poll: a file gave a row metric a step below an earlier poll's; the record
        # metrics it did that to (a record step again is a duplicate, an error in any order)
        self._back, self._back_records = False, set[str]()

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return JsonlSource.accepts(spec)

    def read(self) -> Run:
        return self._whole.read()

    # -- LiveSource ---------------------------------------------------------------------
    def poll(self) -> Poll:
        if self._recall:
            self._recall_emitted()
        records, emitted = set(self.record_metrics), set(self.step_keys)
        chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._back, self._back_records = False, set()
        for path in self._files():
            if path in self.held:
                change = self.held[path].change(path)
                if change is None:
                    continue  # still the earlier run's content: not this run's
                held = self.held[path]  # dropped once what it needs is read: a failed
                # read leaves it held for the next try
                earlier = _lines_in(path, held.size) if change == "appended" else 0
                del self.held[path]
                self.changed[path] = change
                if change == "appended":
                    self.tails[path] = _Tail(path, earlier_lines=earlier)
            tail = self.tails.get(path)
            if tail is None:
                tail = self.tails[path] = _Tail(path)
            self._poll_file(tail, chunks)
        if self._back:
            return self._reread()
        ordered: dict[int, bool] = {}  # a row's metrics share one steps array: check it once
        series = {
            metric: merge_chunks(metric, parts, self.step_keys[metric], ordered)
            for metric, parts in sorted(chunks.items())
        }
        # a metric read as rows until now (no steps kept) that a record line now logs:
        # its steps so far are read back once, as `check` judges all of its points
        late = (self.record_metrics - records) & emitted
        self._check_steps({m: s for m, s in series.items() if m not in late})
        if late:
            self._recall_emitted(late)
        if self._back_records - self.metric_errors.keys():  # steps filled in below, no dup
            return self._reread()
        points = sum(len(s) for s in series.values())
        ended = bool(self.tails) and all(t.ended is not None for t in self.tails.values())
        state = self._files_end_state() if ended else RunState.RUNNING
        run = self._whole.run_from({}, state, self._is_dir)
        run.metric_errors = dict(self.metric_errors)
        run.capture = miles_capture(self.step_keys, self.record_metrics)
        return Poll(series=series, run=run, ended=ended, points=points)

    def _reread(self) -> Poll:
        """A file gave a metric a step below one it gave in an earlier poll: `check` sorts
        those points by step, a poll would have judged them after the later ones (`for`,
        windows and `last` judged otherwise). The run is read again from the start of each
        file (held ones stay held), as `check` reads it, and the poll says so (`reset`):
        the session judges it anew, as for a TensorBoard restart."""
        self.rewind()
        return replace(self.poll(), reset=True)

    def rewind(self) -> bool:
        """Back to the start of each file (held ones stay held, an appended file's earlier
        lines stay the earlier run's)."""
        self.tails = {p: _Tail(p, earlier_lines=t.earlier_lines) for p, t in self.tails.items()}
        self.step_keys, self.metric_errors, self.record_metrics = {}, {}, set()
        self.seen, self._recall = {}, False
        return True

    def cursor(self) -> dict[str, Any]:
        return {
            "version": _CURSOR_VERSION,
            "files": {p: t.to_json() for p, t in self.tails.items()},
            "step_keys": dict(self.step_keys),
            "record_metrics": sorted(self.record_metrics),
            "metric_errors": dict(self.metric_errors),
            "seen": {m: s.to_json() for m, s in sorted(self.seen.items())},
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        version = cursor.get("version") if isinstance(cursor, dict) else None
        if version not in (1, _CURSOR_VERSION):
            raise SourceError(
                f"{self.path}: saved read position has version {version!r}, "
                f"this gatekeeper reads version {_CURSOR_VERSION}; drop the saved state to re-read"
            )
        where = "files"
        try:  # all checked before any is kept: a malformed cursor changes nothing
            files = cursor.get("files", {})
            tails = {str(p): _Tail.from_json(str(p), dict(t)) for p, t in files.items()}
            where = "step_keys"
            step_keys = _strings(cursor.get("step_keys", {}))
            names: list[str] = []
            errors: dict[str, str] = {}
            seen: dict[str, _Seen] = {}
            if version != 1:  # 1: saved before duplicate steps were looked for live
                where = "record_metrics"
                names = cursor["record_metrics"]
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    raise ValueError("expected a list of metric names")
                where = "metric_errors"
                errors = _strings(cursor["metric_errors"])
                where = "seen"
                saved = cursor["seen"]
                if not isinstance(saved, dict):
                    raise ValueError(f"expected an object, got {type(saved).__name__}")
                for metric, data in saved.items():
                    where = f"seen[{metric!r}]"
                    seen[str(metric)] = _Seen.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise SourceError(
                f"{self.path}: saved read position is malformed ({where}: {what}); "
                "drop the saved state to re-read"
            ) from None
        self.tails, self.step_keys = tails, step_keys
        self.record_metrics, self.metric_errors, self.seen = set(names), errors, seen
        self._recall = version == 1  # its steps are read back from the files at next poll

    # -- one point per step of a record metric -----------------------------------------
    def _check_steps(self, series: dict[str, Series]) -> None:
        """A step a record metric already has, or has twice in this poll, makes it an
        error with the reason `check` gives those points; another error (a null step)
        that came first stands, and that metric's steps are no longer kept."""
        for metric, s in series.items():
            if metric not in self.record_metrics:
                continue  # rows (HF Trainer): a train and an eval row may share a step
            seen = self.seen.get(metric)
            if metric in self.metric_errors and (seen is None or seen.dup is None):
                self.seen.pop(metric, None)
                continue
            if seen is None:
                seen = self.seen[metric] = _Seen()
            seen.add(s.steps)
            if seen.dup is not None:
                self.metric_errors[metric] = duplicate_reason(s.step_key, *seen.dup)

    def _recall_emitted(self, only: set[str] | None = None) -> None:
        """The steps of the points already emitted, read back from the files once (the
        first `emitted` of each metric in each file, as a rewrite's re-read skips them)
        and not emitted again: for a version-1 cursor, which kept none, or for the record
        metrics `only` (first logged as rows) — so a step logged again is still found."""
        chunks: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for tail in self.tails.values():
            try:
                fh = open_regular(tail.path)
            except FileNotFoundError:
                continue  # its points cannot come again either
            except OSError as exc:
                raise SourceError(f"{tail.path}: cannot read: {exc.strerror}") from None
            parser = self._parser(_Tail(tail.path))
            with fh:
                _read_whole_lines(fh, parser, 0)
            if only is None:
                self.record_metrics |= parser.record_metrics
                for metric, reason in parser.metric_errors.items():
                    self.metric_errors.setdefault(metric, reason)
            for metric, parts in parser.chunks.items():
                if only is not None and metric not in only:
                    continue
                self.step_keys.setdefault(metric, parser.step_keys[metric])
                steps = np.concatenate([p[0] for p in parts])[: tail.emitted.get(metric, 0)]
                chunks.setdefault(metric, []).append((steps, np.zeros(steps.size)))
        self._check_steps(
            {m: merge_chunks(m, parts, self.step_keys[m]) for m, parts in sorted(chunks.items())}
        )
        if only is None:
            self._recall = False

    # -- files --------------------------------------------------------------------------
    def _files(self) -> list[str]:
        """The record files that exist now (none yet is fine: the trainer creates them).
        One stat of the path a poll: a writer may rename over it meanwhile."""
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            self._is_dir = False
            return []  # not created yet, or between a writer's unlink and rename
        except OSError as exc:
            raise SourceError(f"{self.path}: cannot read: {exc.strerror}") from None
        self._is_dir = stat.S_ISDIR(mode)
        if self._is_dir:
            try:
                # dot-files are writers' temp files, renamed into place when complete
                names = sorted(
                    n for n in os.listdir(self.path) if n.endswith(".jsonl") and n[0] != "."
                )
            except OSError as exc:
                raise SourceError(f"{self.path}: cannot list directory: {exc.strerror}") from None
            return [os.path.join(self.path, n) for n in names]
        if stat.S_ISREG(mode):
            return [self.path]
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
        self.record_metrics |= parser.record_metrics
        for metric, reason in parser.metric_errors.items():
            self.metric_errors.setdefault(metric, reason)
        for event in parser.events:
            if event.get("event") == "end" and event.get("line", 0) > tail.earlier_lines:
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
        bounds: dict[int, tuple[int, int]] = {}  # by steps array: a row's metrics share one
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
                span = bounds.get(id(part[0]))
                if span is None:
                    span = bounds[id(part[0])] = (int(part[0].min()), int(part[0].max()))
                self._top(tail, metric, span, parser.record_metrics)
            if skip_emitted:
                tail.emitted[metric] = max(done, int(steps.size))
            else:
                tail.emitted[metric] = tail.emitted.get(metric, 0) + int(steps.size)
        parser.chunks = {}

    def _top(
        self, tail: _Tail, metric: str, span: tuple[int, int], records: set[str]
    ) -> None:
        """Keep the file's highest step of `metric` (`span`: its new points' lowest and
        highest); note a new point below it (of a record metric, `records`, to be told
        from a duplicate first: see `poll`)."""
        low, high = span
        if tail.tops.reaches_below(metric, low):
            if metric in records or metric in self.record_metrics:
                self._back_records.add(metric)
            else:
                self._back = True
        tail.tops.raise_to(metric, high)

    def _files_end_state(self) -> RunState:
        states = [t.ended for t in self.tails.values() if t.ended is not None]
        bad = [s for s in states if s is not RunState.FINISHED]
        return bad[0] if bad else RunState.FINISHED


def _strings(data: Any) -> dict[str, str]:
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise ValueError("expected an object of strings")
    return dict(data)


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
        parser.parse_lines(lines)
        pos += sum(map(len, lines))
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


def _lines_in(path: str, size: int) -> int:
    """The lines in the first `size` bytes of `path`: the earlier run's, whose end marker
    is not the resumed run's end (SourceError if it cannot be read now: counted 0, that
    marker would end the command's run)."""
    try:
        with open_regular(path) as fh:
            return fh.read(size).count(b"\n")
    except OSError as exc:
        raise _cannot_read(path, exc) from None


def _signature(fh: IO[bytes], offset: int) -> str:
    start = max(0, offset - _SIG_BYTES)
    fh.seek(start)
    return fh.read(offset - start).hex()
