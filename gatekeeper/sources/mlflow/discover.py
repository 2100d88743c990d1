"""Daemon discovery of MLflow runs: the runs of some experiments in a state, with some tags."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.errors import SourceUnavailable, UsageError
from gatekeeper.sources.mlflow.source import open_client, source_for

_STATUS = {"running": "RUNNING", "finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


class MlflowFilter(BaseModel):
    """`mlflow: {tracking_uri, experiments: [name or id], state: running, tags: {k: v}}`;
    the tracking URI defaults to MLFLOW_TRACKING_URI."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tracking_uri: str | None = None
    experiments: list[str] = Field(min_length=1)
    state: Literal["running", "finished", "failed", "killed"] = "running"
    tags: dict[str, str] = {}

    def uri(self) -> str:
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise UsageError("mlflow target: set tracking_uri or MLFLOW_TRACKING_URI")
        return uri

    def filter_string(self) -> str:
        """MLflow's search syntax; quotes in tag values are escaped, not interpolated raw."""
        parts = [f"attributes.status = '{_STATUS[self.state]}'"]
        for key, value in sorted(self.tags.items()):
            escaped = value.replace("\\", "\\\\").replace("'", "\\'")
            parts.append(f"tags.`{key.replace('`', '')}` = '{escaped}'")
        return " and ".join(parts)

    def runs(self) -> list[str]:
        uri = self.uri()
        try:
            client = open_client(uri)
            ids = client.experiment_ids(self.experiments)
            found = client.search_runs(ids, self.filter_string())
        except SourceUnavailable:
            raise
        except Exception as exc:  # listing failed this time: the daemon retries later
            raise SourceUnavailable(f"mlflow {self.describe()}: cannot list runs: {exc}") from None
        return sorted(source_for(uri, r.run_id) for r in found)

    def describe(self) -> str:
        tags = f", tags {self.tags}" if self.tags else ""
        return f"mlflow experiments {', '.join(self.experiments)} (state {self.state}{tags})"
