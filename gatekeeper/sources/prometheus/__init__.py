"""Prometheus series as a run's metrics: read and poll (`source.py`) over the HTTP API
(`api.py`), runs listed by a label for the daemon (`discover.py`)."""

from __future__ import annotations

from gatekeeper.sources.prometheus.source import PrometheusSource

__all__ = ["PrometheusSource"]
