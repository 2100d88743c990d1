"""gatekeeper: a training-run health gate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The Python API (`check` for a finished run, `Gate` in-process) is imported on first
# use, so `import gatekeeper` stays light (no numpy, pydantic or YAML until a gate is
# built; measured in bench/bench_import.py). Type checkers see the real signatures.
_LAZY = {
    "check": "gatekeeper.gate",  # judge a finished run, as `gatekeeper check`
    "Gate": "gatekeeper.inprocess",
    "GateFailed": "gatekeeper.inprocess",
    "GateLogger": "gatekeeper.inprocess",
    "Observation": "gatekeeper.inprocess",
    "OnFail": "gatekeeper.inprocess",
}

if TYPE_CHECKING:
    from gatekeeper.gate import check
    from gatekeeper.inprocess import Gate, GateFailed, GateLogger, Observation, OnFail


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gatekeeper' has no attribute {name!r}")


__all__ = ["Gate", "GateFailed", "GateLogger", "Observation", "OnFail", "__version__", "check"]
