"""Small LiveSources for in-process daemon tests: a JSONL tail and a source that hangs."""

from __future__ import annotations

import os
import threading
from typing import Any

from gatekeeper.errors import SourceError
from gatekeeper.model import Run, RunState
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.sources.jsonl.reader import JsonlParser


class TailSource(LiveSource):
    """One JSONL file followed by byte offset; `{"event": "end"}` ends the run."""

    kind = "test-tail"

    def __init__(self, spec: str):
        super().__init__(spec)
        self.offset = 0

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.endswith(".jsonl")

    def read(self) -> Run:
        raise NotImplementedError

    def poll(self) -> Poll:
        name = os.path.basename(self.spec)[: -len(".jsonl")]
        run = Run(name=name, source=self.spec, state=RunState.RUNNING)
        if not os.path.exists(self.spec):
            return Poll(series={}, run=run)
        with open(self.spec, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        parser = JsonlParser(self.spec)
        used = parser.feed(data, final=False)
        self.offset += used
        series = parser.take_series()
        ended = any(e.get("event") == "end" for e in parser.events)
        if ended:
            run.state = RunState.FINISHED
        return Poll(
            series=series, run=run, ended=ended, points=sum(len(s) for s in series.values())
        )

    def cursor(self) -> dict[str, Any]:
        return {"offset": self.offset}

    def restore(self, cursor: dict[str, Any]) -> None:
        self.offset = int(cursor["offset"])


class HangingSource(TailSource):
    """Blocks in poll until `release` is set (a stuck network filesystem, say)."""

    release = threading.Event()

    def poll(self) -> Poll:
        self.release.wait()
        return super().poll()


class FlakySource(TailSource):
    """Cannot be read while a `SPEC.broken` file exists (a permission or mount problem)."""

    def poll(self) -> Poll:
        if os.path.exists(self.spec + ".broken"):
            raise SourceError(f"{self.spec}: cannot read: Permission denied")
        return super().poll()


def open_test_source(spec: str) -> LiveSource:
    if "hang" in os.path.basename(spec):
        return HangingSource(spec)
    if "flaky" in os.path.basename(spec):
        return FlakySource(spec)
    return TailSource(spec)
