"""`JsonlSource`: a JSONL record file or a directory of per-process record files."""

from __future__ import annotations

import os
import re
import stat

import numpy as np

from gatekeeper.errors import SourceError, SourceNotFound, one_line, quote
from gatekeeper.model import Run, RunState, Series, merge_chunks
from gatekeeper.sources.base import Source
from gatekeeper.sources.jsonl.metadata import read_sidecar, sidecar_for
from gatekeeper.sources.jsonl.reader import JsonlParser, jsonl_files, parse_file
from gatekeeper.sources.jsonl.records import miles_capture


class JsonlSource(Source):
    """A finished (or snapshot of a live) run stored as JSONL, read whole."""

    kind = "jsonl"

    def __init__(self, spec: str, step_aliases: dict[str, str] | None = None):
        super().__init__(spec)
        self.path = spec[len("file://") :] if spec.startswith("file://") else spec
        self.step_aliases = step_aliases
        self._name: str | None = None  # name_from_path of an absolute path, found once

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return "://" not in spec or spec.startswith("file://")

    def files(self) -> list[str]:
        if os.path.isdir(self.path):
            found = jsonl_files(self.path)
            if not found:
                raise SourceNotFound(f"{self.path}: directory holds no *.jsonl record files")
            return found
        try:
            mode = os.stat(self.path).st_mode  # one stat: no window between two checks
        except FileNotFoundError:
            raise SourceNotFound(f"{one_line(self.path)}: no such file or directory") from None
        except OSError as exc:
            raise SourceError(f"{one_line(self.path)}: cannot read: {exc.strerror}") from None
        if not stat.S_ISREG(mode):  # a FIFO or a device: never read (it may not end)
            raise SourceError(
                f"{one_line(self.path)}: not a regular file or directory; only regular files "
                "are read"
            )
        return [self.path]

    def _parser(self, path: str) -> JsonlParser:
        if self.step_aliases is None:
            return JsonlParser(path)
        return JsonlParser(path, step_aliases=dict(self.step_aliases))

    def read(self) -> Run:
        chunks: dict[str, list[tuple]] = {}
        step_keys: dict[str, str] = {}
        ended_state: RunState | None = None
        metric_errors: dict[str, str] = {}
        record_metrics: set[str] = set()
        for path in self.files():
            parser = self._parser(path)
            try:
                parse_file(parser, final=True)
            except OSError as exc:
                raise SourceError(f"{one_line(path)}: cannot read: {exc.strerror}") from None
            for metric, parts in parser.chunks.items():
                key = parser.step_keys[metric]
                if step_keys.setdefault(metric, key) != key:
                    raise SourceError(
                        f"{one_line(path)}: metric {quote(metric)} is on step axis {quote(key)} "
                        f"here but on {quote(step_keys[metric])} in another file of this run"
                    )
                chunks.setdefault(metric, []).extend(parts)
            for metric, reason in parser.metric_errors.items():
                metric_errors.setdefault(metric, reason)
            record_metrics |= parser.record_metrics
            for event in parser.events:
                if event.get("event") == "end":
                    ended_state = end_state(event.get("state"))
        series: dict[str, Series] = {}
        for metric in sorted(chunks):
            series[metric] = merge_chunks(metric, chunks.pop(metric), step_keys[metric])
            if metric in record_metrics and metric not in metric_errors:
                dup = duplicate_step(series[metric])
                if dup is not None:
                    metric_errors[metric] = dup
        run = self.run_from(share_steps(series), ended_state)
        run.metric_errors = metric_errors
        run.capture = miles_capture(series, record_metrics)
        return run

    def run_from(
        self,
        series: dict[str, Series],
        ended_state: RunState | None,
        is_dir: bool | None = None,
    ) -> Run:
        """A `Run` of `series` described by the path and its sidecar (name, id, tags,
        config, url, state); `ended_state`, from an end marker, wins over the sidecar's.
        The live tail builds each poll's metadata with it, so both agree (`is_dir`: what
        its poll found the path to be, so the sidecar lookup need not stat it again)."""
        name = self._name
        if name is None:
            name = name_from_path(self.path)
            if os.path.isabs(self.path):  # a relative one depends on the working directory
                self._name = name
        run = Run(name=name, source=self.path, series=series)
        sidecar = sidecar_for(self.path, is_dir)
        if sidecar:
            meta = read_sidecar(sidecar)
            run.name = meta.get("name") or run.name
            run.run_id = meta.get("id")
            run.tags = tuple(meta.get("tags", ()))
            run.config = dict(meta.get("config", {}))
            run.url = meta.get("url")
            if meta.get("state") is not None:
                run.state = meta["state"]
        if ended_state is not None:
            run.state = ended_state
        return run


# Names miles' CI harness gives every run alike: `<record_key>/attempt-<n>/` holds the
# per-process files, `<record_key>/attempt-<n>.merged.jsonl` the merged record.
_GENERIC_NAME = re.compile(r"^(attempt-\d+(\.merged)?|merged|records?|metrics)$")


def name_from_path(path: str) -> str:
    """The run name a record's path gives when no sidecar names it: the file or directory
    name, or its parent's for names every miles run shares (`attempt-0.merged`), so two
    tests' records are not one run called `merged`."""
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    names = [p[: -len(".jsonl")] if p.endswith(".jsonl") else p for p in parts if p]
    while len(names) > 1 and _GENERIC_NAME.match(names[-1]):
        names.pop()
    return names[-1] if names else path


def duplicate_step(series: Series) -> str | None:
    """A miles record holds one point per step; two at one step (two processes, or a
    retried step) cannot be told apart, so miles' gate fails the metric: say which step."""
    steps = series.steps
    if steps.size < 2:
        return None
    same = np.flatnonzero(steps[1:] == steps[:-1])
    if not same.size:
        return None
    step = int(steps[same[0]])
    count = int(np.count_nonzero(steps == step))
    return duplicate_reason(series.step_key, step, count)


def duplicate_reason(step_key: str, step: int, count: int) -> str:
    """Why a record metric with `count` points at `step` cannot be judged (the live tail
    words it the same, so `watch` and `check` say one thing)."""
    return f"duplicate {step_key} {step} ({count} points); a record holds one point per step"


def share_steps(series: dict[str, Series]) -> dict[str, Series]:
    """Metrics logged on the same rows share one step array (half the memory of a run)."""
    seen: dict[tuple[str, int], list[Series]] = {}
    out: dict[str, Series] = {}
    for name, s in series.items():
        twin = next(
            (t for t in seen.get((s.step_key, len(s)), []) if np.array_equal(t.steps, s.steps)),
            None,
        )
        if twin is None:
            seen.setdefault((s.step_key, len(s)), []).append(s)
            out[name] = s
        else:
            out[name] = Series(s.metric, twin.steps, s.values, s.step_key)
    return out


def end_state(value: object) -> RunState:
    """The state an end marker (`{"event": "end", "state": ...}`) gives the run; a
    missing or unknown state reads as finished (the writer reached its end)."""
    try:
        return RunState(value) if value else RunState.FINISHED
    except ValueError:
        return RunState.FINISHED
