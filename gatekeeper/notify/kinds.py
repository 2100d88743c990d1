"""The notifier kinds, by the `kind:` a daemon config names: the built-in ones listed
here, plus any a third-party package adds through the `gatekeeper.notifiers` entry
point (the one registry every pluggable kind uses)."""

from __future__ import annotations

from gatekeeper.notify.base import Notifier
from gatekeeper.registry import Registry, subclass_of


def _builtins() -> dict[str, type[Notifier]]:
    from gatekeeper.notify.lark import LarkNotifier
    from gatekeeper.notify.slack import SlackNotifier
    from gatekeeper.notify.webhook import WebhookNotifier

    return {k.kind: k for k in (SlackNotifier, LarkNotifier, WebhookNotifier)}


NOTIFIERS: Registry[type[Notifier]] = Registry("notifier", _builtins, subclass_of(Notifier))


def notifier_kind(kind: str) -> type[Notifier]:
    """The Notifier class of a config `kind`; ValueError naming the known kinds."""
    found = NOTIFIERS.get(kind)
    if found is None:
        raise ValueError(f"unknown notifier kind {kind!r}; known: {', '.join(NOTIFIERS.names())}")
    return found
