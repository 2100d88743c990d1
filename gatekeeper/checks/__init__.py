"""Check kinds: one module per kind in this package, found by scanning it (nothing to
register); a third-party package adds one through the `gatekeeper.checks` entry point."""

from __future__ import annotations

import importlib
import pkgutil

from gatekeeper.checks.base import AggregateCheck, Check, EvalContext, MaskCheck, Outcome
from gatekeeper.registry import Registry


def _scan() -> dict[str, type[Check]]:
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
    return kinds


def _plugin_check(name: str, obj: object) -> type[Check]:
    if not (isinstance(obj, type) and issubclass(obj, Check)):
        raise TypeError(f"{obj!r} is not a gatekeeper.checks.Check subclass")
    if getattr(obj, "kind", None) != name:
        raise ValueError(f"its kind is {getattr(obj, 'kind', None)!r}, the entry point {name!r}")
    return obj


CHECKS: Registry[type[Check]] = Registry("check", _scan, _plugin_check)


def registry() -> dict[str, type[Check]]:
    """Every check kind by its YAML key."""
    return dict(sorted(CHECKS.all().items()))


__all__ = ["AggregateCheck", "CHECKS", "Check", "EvalContext", "MaskCheck", "Outcome", "registry"]
