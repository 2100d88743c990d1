"""gatekeeper: a training-run health gate."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The Python API (`check` for a finished run, `Gate` in-process) is imported on first
# use, so `import gatekeeper` stays light (no numpy, pydantic or YAML until a gate is
# built; measured in bench/bench_import.py). Type checkers read __init__.pyi beside this
# file, which names the same objects by import (the lazy-loading stub of SPEC 1): the
# package itself imports nothing above the ground floor (tests/test_layers.py).
_LAZY = {
    "check": "gatekeeper.gate",  # judge a finished run, as `gatekeeper check`
    "Gate": "gatekeeper.inprocess",
    "GateFailed": "gatekeeper.inprocess",
    "GateLogger": "gatekeeper.inprocess",
    "Observation": "gatekeeper.inprocess",
    "OnFail": "gatekeeper.inprocess",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gatekeeper' has no attribute {name!r}")


__all__ = ["Gate", "GateFailed", "GateLogger", "Observation", "OnFail", "__version__", "check"]
