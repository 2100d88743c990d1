"""Check kinds, found by scanning this package: one module per kind, nothing to register."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from gatekeeper.checks.base import AggregateCheck, Check, EvalContext, MaskCheck, Outcome, fmt


@cache
def registry() -> dict[str, type[Check]]:
    """Every check kind by its YAML key."""
    kinds: dict[str, type[Check]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Check)
                and obj.__module__ == module.__name__
                and "kind" in vars(obj)
            ):
                kinds[obj.kind] = obj
    return dict(sorted(kinds.items()))


__all__ = ["AggregateCheck", "Check", "EvalContext", "MaskCheck", "Outcome", "fmt", "registry"]
