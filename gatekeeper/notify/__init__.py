"""Notifiers: one module per destination kind, found by kind in the NOTIFIERS registry
(kinds.py); a third-party package adds a kind through the `gatekeeper.notifiers` entry
point. A kind's `settings_model` (a NotifierSettings subclass, settings.py) validates its
`notifiers:` entries (`NotifierEntry`, kinds.py)."""

from __future__ import annotations

from gatekeeper.notify.base import Notifier, SendError
from gatekeeper.notify.channel import Channel, ChannelHooks
from gatekeeper.notify.kinds import NOTIFIERS, NotifierEntry, notifier_kind
from gatekeeper.notify.settings import NotifierSettings


def build_notifier(cfg: NotifierSettings) -> Notifier:
    """The notifier a config entry describes; URL and secret come from the environment."""
    return notifier_kind(cfg.kind).from_settings(cfg)


__all__ = [
    "Channel", "ChannelHooks", "NOTIFIERS", "Notifier", "NotifierEntry", "NotifierSettings",
    "SendError", "build_notifier", "notifier_kind",
]
