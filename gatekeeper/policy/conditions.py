"""Conditions on run metadata, for a rule's `when:` and a policy's `match.config`.

`{config.lora_rank: 0}` is equality. A mapping of operators compares otherwise:
`{config.lora_rank: {gt: 0}}`, `{config.use_rollout_routing_replay: {truthy: false}}`.
A key the run does not have compares as null: `eq: null`, `ne: 0`, `not_in`, `truthy:
false` and `exists: false` hold for it; ordering operators (`gt`, `ge`, `lt`, `le`) never do.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

OPERATORS = ("eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "exists", "truthy", "glob")


@dataclass(frozen=True)
class Condition:
    """One `when:` test of a policy or rule: `key` `op` `operand` on the run's metadata."""

    key: str  # "config.a.b", "name", "tags", "state"
    op: str
    operand: Any

    def holds(self, found: bool, value: Any) -> bool:
        op, want = self.op, self.operand
        if op == "exists":
            return found is bool(want)
        if op == "truthy":
            return bool(value) is bool(want)
        if self.key == "tags" and op in ("eq", "in"):
            # tags are a list: `tags: x` / `tags: {in: [x, y]}` mean "has any of"
            wanted = want if isinstance(want, list) else [want]
            return any(t in (value or ()) for t in wanted)
        if op == "eq":
            return _equal(value, want)
        if op == "ne":
            return not _equal(value, want)
        if op == "in":
            return any(_equal(value, w) for w in want)
        if op == "not_in":
            return not any(_equal(value, w) for w in want)
        if op == "glob":
            return isinstance(value, str) and fnmatch.fnmatchcase(value, str(want))
        if value is None or isinstance(value, bool) != isinstance(want, bool):
            return False
        try:
            if op == "gt":
                return bool(value > want)
            if op == "ge":
                return bool(value >= want)
            if op == "lt":
                return bool(value < want)
            if op == "le":
                return bool(value <= want)
        except TypeError:
            return False
        raise ValueError(f"unknown operator {op!r}")

    def describe(self) -> str:
        sym = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
        if self.op in sym:
            return f"{self.key} {sym[self.op]} {self.operand!r}"
        return f"{self.key} {self.op} {self.operand!r}"


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, str) and not isinstance(b, str) and b is not None:
        return a == str(b)  # config values from --config k=v arrive as text sometimes
    return bool(a == b)


def parse_conditions(raw: dict[str, Any]) -> list[Condition]:
    """Turn a `when:` mapping into conditions; raises ValueError with the offending key."""
    out: list[Condition] = []
    for key, spec in raw.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"condition keys must be strings, got {key!r}")
        if not (key.startswith("config.") or key in ("name", "tags", "state", "id")):
            raise ValueError(
                f"condition key {key!r} must be config.<dotted key>, name, tags, state or id"
            )
        if isinstance(spec, dict) and spec and all(k in OPERATORS for k in spec):
            for op, operand in spec.items():
                if op in ("in", "not_in") and not isinstance(operand, list):
                    raise ValueError(f"{key}.{op} takes a list, got {operand!r}")
                if op in ("exists", "truthy") and not isinstance(operand, bool):
                    raise ValueError(f"{key}.{op} takes true or false, got {operand!r}")
                out.append(Condition(key, op, operand))
        elif isinstance(spec, dict):
            bad = sorted(k for k in spec if k not in OPERATORS)
            raise ValueError(
                f"{key}: unknown operator(s) {bad}; use one of {', '.join(OPERATORS)}"
            )
        else:
            out.append(Condition(key, "eq", spec))
    return out


def first_failing(conditions: list[Condition], run: Any) -> Condition | None:
    """The first condition the run does not satisfy, or None when all hold."""
    for cond in conditions:
        found, value = run.lookup(cond.key)
        if not cond.holds(found, value if found else None):
            return cond
    return None
