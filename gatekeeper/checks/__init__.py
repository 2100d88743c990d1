"""Check kinds: one module per kind in this package, found by scanning it (nothing to
register); a third-party package adds one through the `gatekeeper.checks` entry point.

A kind's module is named after the kind (`max` in `max.py`), so a policy's kinds are
looked up one by one: a policy that uses `max` and `min` imports (and builds the pydantic
models of) those two modules only, not every kind in the package."""

from __future__ import annotations

import importlib
import importlib.util

from gatekeeper.checks.base import AggregateCheck, Check, EvalContext, MaskCheck, Outcome
from gatekeeper.registry import Registry, kinds_in, scan_package, subclass_of


def _scan() -> dict[str, type[Check]]:
    return scan_package(__name__, Check, skip=("base",))


def _one(kind: str) -> type[Check] | None:
    """The built-in kind `kind` from its own module `checks/<kind>.py`, or None when
    there is no such module defining it (the registry then scans everything)."""
    if not kind.isidentifier() or kind.startswith("_") or kind == "base":
        return None
    name = f"{__name__}.{kind}"
    if importlib.util.find_spec(name) is None:
        return None
    found: type[Check] | None = kinds_in(importlib.import_module(name), Check).get(kind)
    return found


CHECKS: Registry[type[Check]] = Registry("check", _scan, subclass_of(Check), _one)


def registry() -> dict[str, type[Check]]:
    """Every check kind by its YAML key (imports every kind: to look one up, `CHECKS.get`)."""
    return dict(sorted(CHECKS.all().items()))


__all__ = ["AggregateCheck", "CHECKS", "Check", "EvalContext", "MaskCheck", "Outcome", "registry"]
