"""The verdict onto a wandb run: a `gate:pass`/`gate:fail` tag and `gatekeeper/*` summary
keys.

A `wandb://` run gets them on the server; a local run directory (offline or synced, a
`.wandb` file, a folder's `latest-run`) gets `gatekeeper-verdict.json` inside it.

On the server, the API's `upsertBucket` replaces a run's whole summary (and config, when
sent) with what the client holds, so this reloads the run right before writing, sends
only `tags` and `summaryMetrics` (never config, notes or name), and changes nothing in
them but the gate tag and the `gatekeeper/` keys. The window between reload and write
is one round trip.
"""

from __future__ import annotations

import json
import os
from typing import Any

from gatekeeper.sources.annotation import (
    FILE_NAME,
    GATE_TAGS,
    SUMMARY_PREFIX,
    gate_tag,
    summary_keys,
    write_verdict_file,
)
from gatekeeper.sources.base import Annotator
from gatekeeper.sources.wandb.api import SCHEME, WandbApiSource
from gatekeeper.sources.wandb.local import resolve_run_dir
from gatekeeper.verdict import Verdict

UPSERT = """
mutation UpsertBucket($id: String, $tags: [String!], $summaryMetrics: JSONString) {
    upsertBucket(input: {id: $id, tags: $tags, summaryMetrics: $summaryMetrics}) {
        bucket { id }
    }
}
"""


class WandbAnnotator(Annotator):
    """`wandb://` runs on the server, and local paths that name a wandb run directory."""

    def accepts(self, spec: str) -> bool:
        return spec.startswith(SCHEME) or local_run_dir(spec) is not None

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        if spec.startswith(SCHEME):
            return annotate_remote(spec, verdict, report)
        run_dir = local_run_dir(spec)
        assert run_dir is not None  # accepts() said so
        return write_verdict_file(os.path.join(run_dir, FILE_NAME), verdict, report)


def local_run_dir(spec: str) -> str | None:
    """The wandb run directory a local `spec` names (a `latest-run` followed), or None."""
    if "://" in spec and not spec.startswith("file://"):
        return None
    path = spec.removeprefix("file://")
    if os.path.isdir(path) or path.endswith(".wandb"):
        return resolve_run_dir(path)
    return None


def annotate_remote(source: str, verdict: Verdict, report: str | None) -> str:
    src = WandbApiSource(source)
    run = src.load_run()  # a fresh load: the snapshot the write is based on
    tags = new_tags(list(run.tags or ()), gate_tag(verdict))
    summary = new_summary(dict(run.summary_metrics or {}), summary_keys(verdict, report))

    def write() -> Any:
        return run._exec(
            UPSERT, id=run.storage_id, tags=tags, summaryMetrics=json.dumps(summary, default=str)
        )

    src.retry.call(f"annotate {source}", write)
    return f"annotated {source}: tag {gate_tag(verdict) or '(none: pending)'}, " + ", ".join(
        k for k in summary if k.startswith(SUMMARY_PREFIX)
    )


def new_tags(tags: list[str], tag: str | None) -> list[str]:
    """The run's tags with the previous gate tag replaced (order of the others kept)."""
    kept = [t for t in tags if t not in GATE_TAGS]
    return kept + [tag] if tag else kept


def new_summary(summary: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The run's summary with the previous `gatekeeper/` keys replaced by `ours`."""
    kept = {k: v for k, v in summary.items() if not k.startswith(SUMMARY_PREFIX)}
    return {**kept, **ours}
