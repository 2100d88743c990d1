"""The verdict of a JSONL run, as `gatekeeper-verdict.json` beside its records."""

from __future__ import annotations

import os

from gatekeeper.sources.annotation import FILE_NAME, write_verdict_file
from gatekeeper.sources.base import Annotator
from gatekeeper.sources.jsonl.source import JsonlSource
from gatekeeper.verdict import Verdict


def verdict_path(path: str) -> str:
    """Where the verdict goes: inside a run directory, beside a record file
    (`run.jsonl` -> `run.gatekeeper-verdict.json`)."""
    if os.path.isdir(path):
        return os.path.join(path, FILE_NAME)
    stem = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
    return f"{stem}.{FILE_NAME}"


class JsonlAnnotator(Annotator):
    """Any local path: the catch-all, asked after the families that recognise a layout."""

    def accepts(self, spec: str) -> bool:
        return JsonlSource.accepts(spec)

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        return write_verdict_file(verdict_path(spec.removeprefix("file://")), verdict, report)
