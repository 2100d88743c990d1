"""The notifier kinds, by the `kind:` a daemon config names: the built-in ones listed
here, plus any a third-party package adds through the `gatekeeper.notifiers` entry
point (the one registry every pluggable kind uses)."""

from __future__ import annotations

from gatekeeper.notify.base import Notifier
from gatekeeper.registry import Registry


def _builtins() -> dict[str, type[Notifier]]:
    from gatekeeper.notify.lark import LarkNotifier
    from gatekeeper.notify.slack import SlackNotifier
    from gatekeeper.notify.webhook import WebhookNotifier

    return {k.kind: k for k in (SlackNotifier, LarkNotifier, WebhookNotifier)}


def _plugin(name: str, obj: object) -> type[Notifier]:
    if not (isinstance(obj, type) and issubclass(obj, Notifier)):
        raise TypeError(f"{obj!r} is not a gatekeeper.notify.Notifier subclass")
    if getattr(obj, "kind", None) != name:
        raise ValueError(f"its kind is {getattr(obj, 'kind', None)!r}, the entry point {name!r}")
    return obj


NOTIFIERS: Registry[type[Notifier]] = Registry("notifier", _builtins, _plugin)


def notifier_kind(kind: str) -> type[Notifier]:
    """The Notifier class of a config `kind`; ValueError naming the known kinds."""
    found = NOTIFIERS.get(kind)
    if found is None:
        raise ValueError(f"unknown notifier kind {kind!r}; known: {', '.join(NOTIFIERS.names())}")
    return found
