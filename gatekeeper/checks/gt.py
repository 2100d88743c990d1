"""`gt: v` — every judged value x satisfies x > v (strict, signed)."""

from __future__ import annotations

from gatekeeper.checks.bound import Bound


class Gt(Bound):
    kind = "gt"
    op = ">"
