"""MLflow runs: read and poll (`source.py`) over REST (`rest.py`) or a local store
(`store.py`), the verdict written back as tags and an artifact (`annotate.py`), runs listed
for the daemon (`discover.py`)."""

from __future__ import annotations

from gatekeeper.sources.mlflow.source import MlflowSource

__all__ = ["MlflowSource"]
