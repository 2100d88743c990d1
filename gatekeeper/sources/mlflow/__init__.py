"""MLflow runs: read and poll (`source.py`) over REST (`rest.py`) or a local store
(`store.py`), the run created after a live watch began (`follow.py`), the verdict written
back as tags and an artifact (`annotate.py`), runs listed for the daemon (`discover.py`).

Importing the package imports none of its modules: `source_for` answers the detection pass
(`sources.open_source`) by the SOURCE's scheme, `KIND` and `MlflowSource` are built when
first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.sources.base import (
    Annotator,
    Source,
    SourceFamily,
    filter_lists_itself,
    lazy_family,
)
from gatekeeper.sources.mlflow.scheme import SCHEMES

if TYPE_CHECKING:
    from gatekeeper.sources.mlflow.source import MlflowSource
    from gatekeeper.verdict import Verdict


# Declared, not bound: the module's __getattr__ builds it when first asked for.
KIND: SourceFamily


def source_for(spec: str) -> type[Source] | None:
    """MlflowSource for `spec` of our scheme, else None (nothing imported)."""
    if not spec.startswith(SCHEMES):
        return None
    from gatekeeper.sources.mlflow.source import MlflowSource

    return MlflowSource


class MlflowAnnotator(Annotator):
    """`gate` and `gatekeeper.*` tags plus a verdict artifact on the MLflow run."""

    def accepts(self, spec: str) -> bool:
        return spec.startswith(SCHEMES)

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        from gatekeeper.sources.mlflow.annotate import annotate_run

        return annotate_run(spec, verdict, report)


def _kind() -> SourceFamily:
    from gatekeeper.sources.mlflow.follow import NewRunSource
    from gatekeeper.sources.mlflow.source import MlflowSource

    return SourceFamily(
        name="mlflow",
        examples=(MlflowSource.example,),
        sources=(MlflowSource,),
        live_sources=(NewRunSource,),
        annotator=MlflowAnnotator(),
        target_key="mlflow",
        discovery=filter_lists_itself,
        extra="mlflow",
    )


__getattr__ = lazy_family(globals(), _kind, {"MlflowSource": "gatekeeper.sources.mlflow.source"})


__all__ = ["KIND", "SCHEMES", "MlflowSource", "source_for"]
