"""Prometheus series as a run's metrics: read and poll (`source.py`) over the HTTP API
(`api.py`), runs listed by a label for the daemon (`discover.py`).

Importing the package imports none of its modules: `source_for` answers the detection pass
(`sources.open_source`) by the SOURCE's scheme, `KIND` and `PrometheusSource` are built
when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.sources.base import lazy_family
from gatekeeper.sources.prometheus.scheme import SCHEMES

if TYPE_CHECKING:
    from gatekeeper.sources.base import Source, SourceFamily
    from gatekeeper.sources.prometheus.source import PrometheusSource


# Declared, not bound: the module's __getattr__ builds it when first asked for.
KIND: SourceFamily


def source_for(spec: str) -> type[Source] | None:
    """PrometheusSource for `spec` of our scheme, else None (nothing imported)."""
    if not spec.startswith(SCHEMES):
        return None
    from gatekeeper.sources.prometheus.source import PrometheusSource

    return PrometheusSource


def _kind() -> SourceFamily:
    from gatekeeper.sources.base import SourceFamily, filter_lists_itself
    from gatekeeper.sources.prometheus.source import PrometheusSource

    return SourceFamily(
        name="prometheus",
        examples=(PrometheusSource.example,),
        sources=(PrometheusSource,),
        annotator=None,
        target_key="prometheus",
        discovery=filter_lists_itself,
        extra="prometheus",
    )


__getattr__ = lazy_family(
    globals(),
    _kind,
    {
        "PrometheusSource": "gatekeeper.sources.prometheus.source",
    },
)


__all__ = ["KIND", "SCHEMES", "PrometheusSource", "source_for"]
