"""`min: v` — every judged value x satisfies x >= v (signed)."""

from __future__ import annotations

from gatekeeper.checks.bound import Bound


class Min(Bound):
    kind = "min"
    op = ">="
