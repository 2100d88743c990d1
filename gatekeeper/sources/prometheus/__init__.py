"""Prometheus series as a run's metrics: read and poll (`source.py`) over the HTTP API
(`api.py`), runs listed by a label for the daemon (`discover.py`).

Importing the package imports none of its modules: `source_for` answers the detection pass
(`sources.open_source`) by the SOURCE's scheme, `KIND` and `PrometheusSource` are built
when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """`KIND` (built once) and `PrometheusSource`, imported when first used."""
    if name == "KIND":
        globals()["KIND"] = kind = _kind()
        return kind
    if name == "PrometheusSource":
        from gatekeeper.sources.prometheus.source import PrometheusSource

        return PrometheusSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KIND", "SCHEMES", "PrometheusSource", "source_for"]
