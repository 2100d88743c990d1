"""`abs_max: v` — judged by magnitude: |x| <= v. What a signed `x < v` assert meant."""

from __future__ import annotations

from pydantic import Field

from gatekeeper.checks.bound import Bound


class AbsMax(Bound):
    kind = "abs_max"
    op = "<="
    magnitude = True
    value: float = Field(ge=0)
