"""Generic JSON webhook: the grouped alerts as they are stored, for any receiver.

Delivery is at least once (a restart between the receiver's answer and the outbox row
marked sent sends the row again), so each alert carries `key`, the same on every delivery
of it, and the request an `Idempotency-Key` header derived from its alerts' keys: a
receiver that keeps the keys it has seen drops the second delivery."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from gatekeeper.notify.base import Limit, Notifier
from gatekeeper.notify.grouping import Group, alert_key


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
                        "alerts": [{**a, "key": alert_key(a)} for a in g.alerts],
                    }
                    for g in groups
                ],
            }
        ]

    def headers(self, body: dict[str, Any]) -> dict[str, str]:
        """`Idempotency-Key`: a digest of the keys of the alerts the body carries (none for
        a body `render` did not make)."""
        keys = sorted(str(a.get("key")) for g in body.get("groups", ()) for a in g["alerts"])
        if not keys:
            return {}
        return {"Idempotency-Key": hashlib.sha256(" ".join(keys).encode()).hexdigest()[:32]}
