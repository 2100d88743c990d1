"""The text keys a stored value is found by, in miles' form so a miles history imports
as it is: `steps_key` / `check_key` are canonical JSON (sorted keys, no whitespace) of
the rule's step selection and band as written.

- steps: `all` -> `"all"`, `last` -> `"last"`, `[0, 1]` -> `[0,1]` (miles' literals,
  quotes included); selections miles lacks (`first`, `{from, to}`, `{last: n}`) key on
  their canonical schema form.
- band: `{rel_up: 0.5, abs_floor_up: 0.1, ...}` -> `{"abs_floor_up":0.1,"rel_up":0.5}`.
  Window settings (`last_n`, `min_history`) and the series declaration are left out:
  tuning how much history is read never cold-starts it (miles' history limit is not
  part of its identity either).
"""

from __future__ import annotations

import json
from typing import Any

NOT_IDENTITY = frozenset({"last_n", "min_history", "series"})


def canonical(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the stable text of a key."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def steps_key(dump: dict[str, Any]) -> str:
    """From a `Steps` model dump (`exclude_defaults`)."""
    kind = dump.get("kind")
    if kind in ("all", "last"):
        return canonical(kind)
    if kind == "list":
        return canonical(list(dump.get("steps", [])))
    return canonical(dump)


def check_key(params: dict[str, Any]) -> str:
    """From the history check's parameters as written (`exclude_unset`)."""
    return canonical({k: v for k, v in params.items() if k not in NOT_IDENTITY})


def from_legacy(old_steps_key: str, old_check_key: str) -> tuple[str, str]:
    """Keys of gatekeeper's first store layout (`{"kind":"list","steps":[0]}`,
    `{"history":{...}}`) in today's form, for `history migrate`."""
    steps = json.loads(old_steps_key)
    check = json.loads(old_check_key)
    if isinstance(check, dict) and set(check) == {"history"} and isinstance(check["history"], dict):
        check = check["history"]
    return steps_key(steps), check_key(check)
