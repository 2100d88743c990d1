"""Optional dependencies: which extra installs which library, and the one line that says so.

`pip install gatekeeper` is the core (JSONL runs, the engine, the checks, the reports, the
CLI). A source family, the daemon, a history backend or a trainer callback that needs more
asks for it at its boundary, before it reads anything: `require(extra, what)` looks for
the extra's modules without importing them, and `load(module, extra, what)` imports one;
a library that is not installed is a `MissingExtra` (exit 2), one line naming
`pip install 'gatekeeper[EXTRA]'` (as httpx says `pip install 'httpx[cli]'`).

`EXTRAS` mirrors `[project.optional-dependencies]` in pyproject.toml by the modules
gatekeeper imports (`tests/test_extras.py` holds the two together).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from types import ModuleType

from gatekeeper.errors import UsageError

# extra -> the top-level modules gatekeeper imports from what it installs
EXTRAS: dict[str, tuple[str, ...]] = {
    "wandb": ("wandb", "google.protobuf"),
    "tensorboard": ("google.protobuf", "google_crc32c"),
    "mlflow": ("httpx", "mlflow", "sqlalchemy", "alembic"),
    "prometheus": ("httpx",),
    "serve": ("apscheduler", "prometheus_client", "waitress", "httpx"),
    "postgres": ("psycopg",),
    "hf": ("transformers", "accelerate"),
    "lightning": ("lightning",),
}


class MissingExtra(UsageError):
    """A feature was asked for whose optional dependencies are not installed."""


def message(extra: str, what: str, module: str) -> str:
    """The one line: what needed which module, and the install command that brings it."""
    return (
        f"{what} needs {module}, which is not installed: pip install 'gatekeeper[{extra}]'"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or half-installed
        return False


def require(extra: str, what: str, modules: Iterable[str] | None = None) -> None:
    """Raise MissingExtra when a module of `extra` (or only `modules` of it, for a
    backend that uses part of the extra) is not installed. Imports none of them."""
    for module in EXTRAS[extra] if modules is None else modules:
        if not _installed(module):
            raise MissingExtra(message(extra, what, module))


def load(module: str, extra: str, what: str) -> ModuleType:
    """`import module`, a missing library of `extra` said as MissingExtra (any other
    import failure, a broken install, stays what it is)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if any(missing == m or missing.startswith(m + ".") or m.startswith(missing + ".")
               for m in EXTRAS[extra]):
            raise MissingExtra(message(extra, what, missing)) from None
        raise
