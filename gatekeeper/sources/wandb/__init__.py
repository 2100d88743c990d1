"""The wandb source family: local `.wandb` run directories and runs on a wandb server.

`log` frames the `.wandb` transaction log, `decode` turns its records into columns,
`axes` maps metrics to their step axes, `local` reads and tails a run directory, `api`
reads a `wandb://` run through `wandb.Api`, `summary` reads step-less summary values,
`annotate` writes the verdict back, `discover` lists a project's runs for the daemon.

Importing this package does not import the wandb SDK: it is imported where a run is
read or listed, so gatekeeper's other families work (and load fast) without it.
"""

from __future__ import annotations

from gatekeeper.sources.base import SourceFamily
from gatekeeper.sources.wandb.annotate import WandbAnnotator
from gatekeeper.sources.wandb.api import WandbApiSource
from gatekeeper.sources.wandb.discover import ProjectRuns
from gatekeeper.sources.wandb.local import WandbLocalSource

KIND = SourceFamily(
    name="wandb",
    examples=("wandb://ENTITY/PROJECT/RUN_ID", "wandb/offline-run-*/", "wandb/ (its latest-run)"),
    sources=(WandbApiSource, WandbLocalSource),
    annotator=WandbAnnotator(),
    target_key="wandb",
    discovery=ProjectRuns.from_filter,
)

__all__ = ["KIND", "WandbApiSource", "WandbLocalSource"]
