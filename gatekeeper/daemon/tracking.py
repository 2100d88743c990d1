"""Debounce rule statuses across polls. Pure: `now` is passed in.

A rule's confirmed status changes only after the new status was seen on `debounce`
consecutive polls (a final verdict confirms at once: there is no next poll). `since` is
when the confirmed status began; alerts and metrics use the confirmed status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gatekeeper.daemon.state import RuleRow
from gatekeeper.verdict import RuleResult

INITIAL = "pending"


def track(
    prev: Mapping[tuple[str, str], RuleRow],
    results: Iterable[RuleResult],
    *,
    debounce: int,
    final: bool,
    now: float,
) -> list[RuleRow]:
    """The rule rows after one poll, one per result, in result order."""
    rows: list[RuleRow] = []
    for result in results:
        key = (result.policy, result.rule)
        old = prev.get(key) or RuleRow(
            result.policy, result.rule, result.severity.value, INITIAL, now
        )
        seen = result.status.value
        row = RuleRow(
            old.policy,
            old.rule,
            result.severity.value,
            old.status,
            old.since,
            message=result.message,
        )
        if seen != old.status:
            count = old.candidate_count + 1 if old.candidate == seen else 1
            if final or count >= debounce:
                row.status, row.since = seen, now
            else:
                row.candidate, row.candidate_count = seen, count
        rows.append(row)
    return rows
