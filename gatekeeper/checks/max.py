"""`max: v` — every judged value x satisfies x <= v (signed)."""

from __future__ import annotations

from gatekeeper.checks.bound import Bound


class Max(Bound):
    kind = "max"
    op = "<="
