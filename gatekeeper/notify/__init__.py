"""Notifiers: one module per destination kind; `build_notifier` picks by config kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.notify.base import Notifier, SendError
from gatekeeper.notify.channel import Channel, ChannelHooks

if TYPE_CHECKING:
    from gatekeeper.daemon.config import Notifier as NotifierConfig


def build_notifier(cfg: NotifierConfig) -> Notifier:
    """The notifier a config entry describes; URL and secret come from the environment."""
    from gatekeeper.notify.lark import LarkNotifier
    from gatekeeper.notify.slack import SlackNotifier
    from gatekeeper.notify.webhook import WebhookNotifier

    kinds: dict[str, type[Notifier]] = {
        "slack": SlackNotifier,
        "lark": LarkNotifier,
        "webhook": WebhookNotifier,
    }
    return kinds[cfg.kind](
        cfg.name,
        cfg.resolved_url(),
        timeout=cfg.timeout,
        max_lines=cfg.max_lines,
        secret=cfg.resolved_secret(),
    )


__all__ = ["Channel", "ChannelHooks", "Notifier", "SendError", "build_notifier"]
