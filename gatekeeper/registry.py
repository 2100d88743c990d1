"""One way to register every pluggable kind: checks, sources, notifiers, commands.

Each kind has one `Registry`, owned by the package that uses it (`checks.CHECKS`,
`sources.plugins.SOURCES`, `notify.NOTIFIERS`, `cli.main.COMMANDS`). A kind is found in
three places, later ones overriding earlier ones by name:

1. the built-in kinds of the owning package: every module in `checks/` and `notify/`
   defining a kind (`scan_package`), the source families `sources.FAMILIES` names;
2. the entry-point group of the kind (`gatekeeper.checks`, `gatekeeper.sources`,
   `gatekeeper.notifiers`, `gatekeeper.commands`), so a third-party distribution adds a
   kind without touching gatekeeper: `[project.entry-points."gatekeeper.checks"]
   my_check = "my_pkg.checks:MyCheck"`;
3. `Registry.register(name, obj)` at run time (tests, notebooks).

A built-in name is never replaced by an entry point of the same name (as with commands:
`gatekeeper check` never scans installed packages), only by `register`.

Start-up stays cheap: nothing is loaded at import. An owning package may give `one`, the
lookup of a single built-in kind by name (checks: `checks/<kind>.py`), so `get(name)` of a
built-in imports that kind's module alone; installed packages are scanned for entry points
only when a name is not built in, or when every kind is asked for (`all`, `names`).
A plug-in that fails to load is a ConfigError naming the distribution, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")

GROUPS = {
    "check": "gatekeeper.checks",
    "source": "gatekeeper.sources",
    "notifier": "gatekeeper.notifiers",
    "command": "gatekeeper.commands",
}


def kinds_in(module: ModuleType, base: type) -> dict[str, Any]:
    """The kinds a module defines (not the ones it imports): subclasses of `base` with a
    `kind` of their own (a shared base without one, like checks' `Bound`, is no kind)."""
    return {
        vars(obj)["kind"]: obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, base)
        and obj.__module__ == module.__name__
        and "kind" in vars(obj)
    }


def scan_package(package: str, base: type, skip: Iterable[str] = ()) -> dict[str, Any]:
    """Every kind the modules of `package` define (adding a kind = adding a module)."""
    import importlib
    import pkgutil

    kinds: dict[str, Any] = {}
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name.startswith("_") or info.name in skip:
            continue
        kinds.update(kinds_in(importlib.import_module(f"{package}.{info.name}"), base))
    return kinds


def subclass_of(base: type, *, named: bool = True) -> Callable[[str, object], type]:
    """A registry's `check` for plug-in classes: `obj` must be a subclass of `base` and,
    when `named`, its `kind` must be the entry point's name."""
    label = f"{base.__module__.rsplit('.', 1)[0]}.{base.__name__}"

    def check(name: str, obj: object) -> type:
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise TypeError(f"{obj!r} is not a {label} subclass")
        if named and getattr(obj, "kind", None) != name:
            raise ValueError(
                f"its kind is {getattr(obj, 'kind', None)!r}, the entry point {name!r}"
            )
        return obj

    return check


@cache
def _entry_points(group: str) -> tuple[EntryPoint, ...]:
    """The installed entry points of `group`, scanned once per process (importlib.metadata
    is imported here, when a kind is not built in or every kind is asked for)."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group=group))


class Registry(Generic[T]):
    """Named objects of one pluggable kind (a Check class, a Source class, a Notifier
    class, a command's `register(subparsers)` function)."""

    def __init__(
        self,
        kind: str,
        builtins: Callable[[], dict[str, T]],
        check: Callable[[str, object], T] | None = None,
        one: Callable[[str], T | None] | None = None,
    ) -> None:
        self.kind = kind
        self.group = GROUPS[kind]
        self._builtins = builtins
        self._check = check  # validates a plug-in's object; returns it typed
        self._one = one  # one built-in kind by name (None: not built in, or not found so)
        self._added: dict[str, T] = {}
        self._loaded: dict[str, T] | None = None

    def register(self, name: str, obj: T) -> None:
        self._added[name] = obj
        self._loaded = None

    def all(self) -> dict[str, T]:
        """Every kind by name: built-ins, then entry points (except those named like a
        built-in), then `register`ed ones."""
        if self._loaded is None:
            builtins = self._builtins()
            plugins = {k: v for k, v in self._plugins().items() if k not in builtins}
            self._loaded = {**builtins, **plugins, **self._added}
        return dict(self._loaded)

    def get(self, name: str) -> T | None:
        """The kind called `name`, or None. A built-in one is found without building the
        other kinds or scanning installed packages when the registry has `one`."""
        if name in self._added:
            return self._added[name]
        if self._loaded is None and self._one is not None:
            found = self._one(name)
            if found is not None:
                return found
        return self.all().get(name)

    def names(self) -> list[str]:
        return sorted(self.all())

    def _plugins(self) -> dict[str, T]:
        from gatekeeper.errors import ConfigError  # not at the top: `--version` imports us

        found: dict[str, T] = {}
        for ep in _entry_points(self.group):
            where = f"entry point {ep.name!r} of group {self.group}"
            dist = getattr(ep, "dist", None)
            if dist is not None:
                where += f" (distribution {dist.name})"
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plug-in is a setup problem, not our bug
                raise ConfigError(
                    f"cannot load the {self.kind} {where}: {type(exc).__name__}: {exc}; "
                    "reinstall or uninstall that package"
                ) from exc
            if self._check is not None:
                try:
                    obj = self._check(ep.name, obj)
                except (TypeError, ValueError) as exc:
                    raise ConfigError(f"the {self.kind} {where} is not usable: {exc}") from exc
            found[ep.name] = obj
        return found

    def builtins(self) -> dict[str, T]:
        """Only the built-in kinds (no entry points scanned)."""
        return {**self._builtins(), **self._added}

    def reset(self) -> None:
        """Forget loaded entry points (after installing a package at run time, in tests)."""
        self._loaded = None
        _entry_points.cache_clear()
