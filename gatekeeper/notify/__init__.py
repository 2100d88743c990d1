"""Notifiers: one module per destination kind, found by kind in the NOTIFIERS registry
(kinds.py); a third-party package adds a kind through the `gatekeeper.notifiers` entry
point. A kind's `settings_model` (a NotifierSettings subclass, settings.py) validates its
`notifiers:` entries (`NotifierEntry`, kinds.py).

The names below are imported when first used (PEP 562): pydantic and httpx cost about
half a second, and `check` imports this package's light `ci` module on every run (the CI
job stamped into its report) without posting anything."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gatekeeper.notify.base import Notifier, SendError
    from gatekeeper.notify.channel import Channel, ChannelHooks
    from gatekeeper.notify.kinds import NOTIFIERS, NotifierEntry, notifier_kind
    from gatekeeper.notify.settings import NotifierSettings

_WHERE = {
    "Notifier": "base", "SendError": "base", "Channel": "channel", "ChannelHooks": "channel",
    "NOTIFIERS": "kinds", "NotifierEntry": "kinds", "notifier_kind": "kinds",
    "NotifierSettings": "settings",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


def build_notifier(cfg: NotifierSettings) -> Notifier:
    """The notifier a config entry describes; URL and secret come from the environment."""
    from gatekeeper.notify.kinds import notifier_kind

    return notifier_kind(cfg.kind).from_settings(cfg)


__all__ = [
    "Channel", "ChannelHooks", "NOTIFIERS", "Notifier", "NotifierEntry", "NotifierSettings",
    "SendError", "build_notifier", "notifier_kind",
]
