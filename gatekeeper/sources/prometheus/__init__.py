"""Prometheus series as a run's metrics: read and poll (`source.py`) over the HTTP API
(`api.py`), runs listed by a label for the daemon (`discover.py`)."""

from __future__ import annotations

from gatekeeper.sources.base import SourceFamily, filter_lists_itself
from gatekeeper.sources.prometheus.source import PrometheusSource

KIND = SourceFamily(
    name="prometheus",
    examples=(PrometheusSource.example,),
    sources=(PrometheusSource,),
    annotator=None,
    target_key="prometheus",
    discovery=filter_lists_itself,
)

__all__ = ["KIND", "PrometheusSource"]
