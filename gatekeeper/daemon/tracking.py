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
    """The rule rows after one poll, one per result, in result order: the row in `prev`
    itself where nothing of it changed (callers never change a row in place)."""
    rows: list[RuleRow] = []
    for result in results:
        key = (result.policy, result.rule)
        # `_value_`: the member's value as an attribute (`.value` is a Python-level
        # property of Enum, ~0.3 us, and this runs twice per rule per poll)
        severity, seen = result.severity._value_, result.status._value_
        old = prev.get(key) or RuleRow(result.policy, result.rule, severity, INITIAL, now)
        if (
            seen == old.status
            and old.candidate is None
            and old.candidate_count == 0
            and old.severity == severity
            and old.message == result.message
        ):
            rows.append(old)  # unchanged (most rules on a steady poll): the row it was
            continue
        row = RuleRow(old.policy, old.rule, severity, old.status, old.since, message=result.message)
        if seen != old.status:
            count = old.candidate_count + 1 if old.candidate == seen else 1
            if final or count >= debounce:
                row.status, row.since = seen, now
            else:
                row.candidate, row.candidate_count = seen, count
        rows.append(row)
    return rows
