"""`lt: v` — every judged value x satisfies x < v (strict, signed): miles' `mtp_loss < 1.0`."""

from __future__ import annotations

from gatekeeper.checks.bound import Bound


class Lt(Bound):
    kind = "lt"
    op = "<"
