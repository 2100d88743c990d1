"""The JSONL source family: record files written by trainers (miles' CI records, per-step rows).

`reader` parses record files (`lines` re-reads a line orjson refused, `records` converts
the miles record form, `values` coerces numbers), `source` reads a run whole,
`live` tails it while it is written, `metadata` reads the sidecar (`run.json`),
`annotate` writes the verdict beside the records, `discover` expands a daemon `glob:`.

Start-up: importing the package imports `source` alone (what `check` of a JSONL file
reads with); `KIND` and `LiveJsonlSource` (the live tail, the annotator, the daemon's
discovery) are imported when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.sources.base import lazy_family
from gatekeeper.sources.jsonl.source import JsonlSource

if TYPE_CHECKING:
    from gatekeeper.sources.base import SourceFamily
    from gatekeeper.sources.jsonl.live import LiveJsonlSource

# Declared, not bound: the module's __getattr__ builds it when first asked for.
KIND: SourceFamily
# Any local path is a JSONL run: the detection pass (`sources.open_source`) asks this
# family after every other one has declined.
FALLBACK = True


def source_for(spec: str) -> type[JsonlSource] | None:
    return JsonlSource if JsonlSource.accepts(spec) else None


def _kind() -> SourceFamily:
    from gatekeeper.sources.base import SourceFamily
    from gatekeeper.sources.jsonl.annotate import JsonlAnnotator
    from gatekeeper.sources.jsonl.discover import GlobRuns
    from gatekeeper.sources.jsonl.live import LiveJsonlSource

    return SourceFamily(
        name="jsonl",
        examples=("runs/grpo.jsonl", "runs/grpo/ (a directory of *.jsonl)"),
        sources=(JsonlSource,),
        live_sources=(LiveJsonlSource,),
        annotator=JsonlAnnotator(),
        target_key="glob",
        discovery=GlobRuns,
    )


__getattr__ = lazy_family(globals(), _kind, {"LiveJsonlSource": "gatekeeper.sources.jsonl.live"})


__all__ = ["KIND", "JsonlSource", "LiveJsonlSource"]
