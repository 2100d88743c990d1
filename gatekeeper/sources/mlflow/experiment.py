"""Poll every run of some experiments at once: one run search (1,000 runs a page) gives each
run's status and metrics, then each metric's history is asked from its cursor (source.py:
a point below a metric's highest step moves nothing the search returns). A poll costs one
request per 1,000 runs plus one per metric of each run found."""

from __future__ import annotations

from gatekeeper.sources.base import Poll
from gatekeeper.sources.mlflow.client import TrackingClient
from gatekeeper.sources.mlflow.source import MlflowSource, open_client, source_for


class ExperimentPoller:
    def __init__(self, tracking_uri: str, experiment_ids: list[str], filter_string: str = "",
                 client: TrackingClient | None = None):
        self.uri = tracking_uri
        self.experiment_ids = experiment_ids
        self.filter_string = filter_string
        self.client = client or open_client(tracking_uri)
        self.sources: dict[str, MlflowSource] = {}

    def poll(self) -> dict[str, Poll]:
        """New points of every run the search finds, by SOURCE string."""
        out: dict[str, Poll] = {}
        for info in self.client.search_runs(self.experiment_ids, self.filter_string):
            key = source_for(self.uri, info.run_id)
            src = self.sources.get(key)
            if src is None:
                src = self.sources[key] = MlflowSource(key, client=self.client)
            out[key] = src.poll_info(info)
        return out
