"""The notifier kinds, by the `kind:` a daemon config names: the built-in ones (every
module of notify/ that defines one), plus any a third-party package adds through the
`gatekeeper.notifiers` entry point (the one registry every pluggable kind uses)."""

from __future__ import annotations

from gatekeeper.notify.base import Notifier
from gatekeeper.registry import Registry, scan_package, subclass_of


def _builtins() -> dict[str, type[Notifier]]:
    """Every module of this package defining a Notifier with a `kind` (lark.py, slack.py,
    webhook.py): a new notifier kind is one new module, nothing else."""
    return scan_package("gatekeeper.notify", Notifier)


NOTIFIERS: Registry[type[Notifier]] = Registry("notifier", _builtins, subclass_of(Notifier))


def notifier_kind(kind: str) -> type[Notifier]:
    """The Notifier class of a config `kind`; ValueError naming the known kinds."""
    found = NOTIFIERS.get(kind)
    if found is None:
        raise ValueError(f"unknown notifier kind {kind!r}; known: {', '.join(NOTIFIERS.names())}")
    return found
