"""`abs_lt: v` — every judged value x satisfies |x| < v (strict): miles' check_kl asserts
`abs(ppo_kl) < 1e-9`, and a value of exactly 1e-9 fails it."""

from __future__ import annotations

from pydantic import Field

from gatekeeper.checks.bound import Bound


class AbsLt(Bound):
    kind = "abs_lt"
    op = "<"
    magnitude = True
    value: float = Field(gt=0)  # |x| < 0 holds for nothing: a policy typo, not a bound
