"""How a check that judges the selected series as a whole (`reach`, `rise`, `stale`,
`isclose`) reports its one conclusion: passed, or failed as a single violation, at the
point that decided it. No check kind here (the registry lists only classes that set
`kind`)."""

from __future__ import annotations

from gatekeeper.checks.base import Outcome
from gatekeeper.verdict import Status


def passed(message: str, step: int | None, value: float | None, judged: int) -> Outcome:
    return Outcome(Status.PASS, message, step=step, value=value, judged=judged)


def failed(message: str, step: int | None, value: float | None, judged: int) -> Outcome:
    """The series as a whole fails: one violation, however many points were judged."""
    return Outcome(Status.FAIL, message, step=step, value=value, violations=1, judged=judged)
