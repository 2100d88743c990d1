"""Generic JSON webhook: the grouped alerts as they are stored, for any receiver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gatekeeper.notify.base import Limit, Notifier
from gatekeeper.notify.grouping import Group


class WebhookNotifier(Notifier):
    kind = "webhook"
    limits = (Limit(10, 1.0),)

    def render(self, groups: Sequence[Group]) -> list[dict[str, Any]]:
        return [
            {
                "version": 1,
                "source": "gatekeeper",
                "groups": [
                    {
                        "title": g.title,
                        "state": g.state,
                        "policy": g.policy,
                        "rule": g.rule,
                        "status": g.status,
                        "severity": g.severity,
                        "reason_class": g.reason,
                        "alerts": g.alerts,
                    }
                    for g in groups
                ],
            }
        ]
