"""The wandb source family: local `.wandb` run directories and runs on a wandb server.

`log` frames the `.wandb` transaction log, `decode` turns its records into columns,
`axes` maps metrics to their step axes, `local` reads and tails a run directory, `api`
reads a `wandb://` run through `wandb.Api`, `summary` reads step-less summary values,
`annotate` writes the verdict back, `discover` lists a project's runs for the daemon.

Importing this package imports none of its modules, nor the wandb SDK or protobuf
(`gatekeeper[wandb]`): `source_for` answers the detection pass (`sources.open_source`), `KIND`
and the source classes are built when first asked for, and the SDK is imported where a
run is read or listed, so gatekeeper's other families work (and load fast) without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.sources.base import lazy_family
from gatekeeper.sources.wandb.scheme import SCHEME

if TYPE_CHECKING:
    from gatekeeper.sources.base import Source, SourceFamily
    from gatekeeper.sources.wandb.api import WandbApiSource
    from gatekeeper.sources.wandb.local import WandbLocalSource


# Declared, not bound: the module's __getattr__ builds it when first asked for.
KIND: SourceFamily


def source_for(spec: str) -> type[Source] | None:
    """The kind that reads `spec` (`wandb://...`; a local run directory, `.wandb` file or
    wandb folder), or None: the detection pass's question (`sources.open_source`)."""
    if spec.startswith(SCHEME):
        from gatekeeper.sources.wandb.api import WandbApiSource

        return WandbApiSource
    if "://" in spec and not spec.startswith("file://"):
        return None  # another family's scheme: nothing of ours imported
    from gatekeeper.sources.wandb.local import WandbLocalSource

    return WandbLocalSource if WandbLocalSource.accepts(spec) else None


def _kind() -> SourceFamily:
    from gatekeeper.sources.base import SourceFamily
    from gatekeeper.sources.wandb.annotate import WandbAnnotator
    from gatekeeper.sources.wandb.api import WandbApiSource
    from gatekeeper.sources.wandb.discover import ProjectRuns
    from gatekeeper.sources.wandb.local import WandbLocalSource

    return SourceFamily(
        name="wandb",
        examples=(
            "wandb://ENTITY/PROJECT/RUN_ID", "wandb/offline-run-*/", "wandb/ (its latest-run)",
        ),
        sources=(WandbApiSource, WandbLocalSource),
        annotator=WandbAnnotator(),
        target_key="wandb",
        discovery=ProjectRuns.from_filter,
        extra="wandb",
    )


__getattr__ = lazy_family(
    globals(),
    _kind,
    {
        "WandbApiSource": "gatekeeper.sources.wandb.api",
        "WandbLocalSource": "gatekeeper.sources.wandb.local",
    },
)


__all__ = ["KIND", "SCHEME", "WandbApiSource", "WandbLocalSource", "source_for"]
