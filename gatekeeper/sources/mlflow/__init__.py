"""MLflow runs: read and poll (`source.py`) over REST (`rest.py`) or a local store
(`store.py`), the verdict written back as tags and an artifact (`annotate.py`), runs listed
for the daemon (`discover.py`)."""

from __future__ import annotations

from gatekeeper.sources.base import Annotator, SourceFamily, filter_lists_itself
from gatekeeper.sources.mlflow.source import MlflowSource
from gatekeeper.verdict import Verdict


class MlflowAnnotator(Annotator):
    """`gate` and `gatekeeper.*` tags plus a verdict artifact on the MLflow run."""

    def accepts(self, spec: str) -> bool:
        return spec.startswith(("mlflow+", "mlflow://"))

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        from gatekeeper.sources.mlflow.annotate import annotate_run

        return annotate_run(spec, verdict, report)



KIND = SourceFamily(
    name="mlflow",
    examples=(MlflowSource.example,),
    sources=(MlflowSource,),
    annotator=MlflowAnnotator(),
    target_key="mlflow",
    discovery=filter_lists_itself,
)

__all__ = ["KIND", "MlflowSource"]
