"""The JSONL source family: record files written by trainers (miles' CI records, per-step rows).

`reader` parses records, `values` coerces their numbers, `source` reads a run whole,
`live` tails it while it is written, `metadata` reads the sidecar (`run.json`),
`annotate` writes the verdict beside the records, `discover` expands a daemon `glob:`.
"""

from __future__ import annotations

from gatekeeper.sources.base import SourceFamily
from gatekeeper.sources.jsonl.annotate import JsonlAnnotator
from gatekeeper.sources.jsonl.discover import GlobRuns
from gatekeeper.sources.jsonl.live import LiveJsonlSource
from gatekeeper.sources.jsonl.source import JsonlSource

KIND = SourceFamily(
    name="jsonl",
    examples=("runs/grpo.jsonl", "runs/grpo/ (a directory of *.jsonl)"),
    sources=(JsonlSource,),
    live_sources=(LiveJsonlSource,),
    annotator=JsonlAnnotator(),
    target_key="glob",
    discovery=GlobRuns,
)

__all__ = ["KIND", "JsonlSource", "LiveJsonlSource"]
