"""Metric names a rule reads that are not one fixed name: a pattern (`eval/*/acc`) judged
on every metric of the run it matches, or `config.KEY` (the metric the run's config names).

Pattern semantics (docs "Policy language"): metric names are paths split at `/`; `*`
matches any run of characters within one segment (never a `/`, possibly none), so
`eval/*/acc` matches `eval/aime/acc` but not `eval/a/b/acc`, and `eval/skipped_*` matches
`eval/skipped_ckpt_missing`. Every other character is itself. Pure: no engine state."""

from __future__ import annotations

import re
from functools import lru_cache

CONFIG = "config."


def is_pattern(metric: str) -> bool:
    return "*" in metric


def config_key(metric: str) -> str | None:
    """KEY of `config.KEY` (a metric read from the run's config), else None."""
    if metric.startswith(CONFIG) and len(metric) > len(CONFIG) and not is_pattern(metric):
        return metric[len(CONFIG) :]
    return None


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    parts = (re.escape(p) for p in pattern.split("*"))
    return re.compile("[^/]*".join(parts))


def matches(pattern: str, name: str) -> bool:
    """Whether metric `name` is one the pattern (or plain name) stands for."""
    if not is_pattern(pattern):
        return pattern == name
    return _compiled(pattern).fullmatch(name) is not None


def any_match(patterns: tuple[str, ...], name: str) -> bool:
    return any(matches(p, name) for p in patterns)


def expanded_id(rule_id: str, metric: str) -> str:
    """The id of a pattern rule's result on one concrete metric: `rule[metric]`."""
    return f"{rule_id}[{metric}]"


def template_id(result_id: str) -> str:
    """The rule id an expanded result id (`rule[metric]`) came from; itself otherwise."""
    head, bracket, _ = result_id.partition("[")
    return head if bracket and result_id.endswith("]") else result_id
