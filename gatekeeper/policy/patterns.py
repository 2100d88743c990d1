"""Metric names a rule reads that are not one fixed name: a pattern (`eval/*/acc`) judged
on every metric of the run it matches, or `config.KEY` (the metric the run's config names).

Pattern semantics (docs "Policy language"): metric names are paths split at `/`; `*`
matches any run of characters within one segment (never a `/`, possibly none), so
`eval/*/acc` matches `eval/aime/acc` but not `eval/a/b/acc`, and `eval/skipped_*` matches
`eval/skipped_ckpt_missing`. Every other character is itself. Pure: no engine state."""

from __future__ import annotations

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
def _segments(pattern: str) -> tuple[tuple[str, ...], ...]:
    """The pattern's `/` segments, each split at its `*`s."""
    return tuple(tuple(seg.split("*")) for seg in pattern.split("/"))


def matches(pattern: str, name: str) -> bool:
    """Whether metric `name` is one the pattern (or plain name) stands for. A `*` never
    crosses a `/`, so segments match one to one, each in time linear in its length
    (a backtracking regex took seconds for `a*a*a*a*a*a*a*a*a*a*b` on a 40-character
    name, and hours past that)."""
    if not is_pattern(pattern):
        return pattern == name
    segments = _segments(pattern)
    parts = name.split("/")
    return len(parts) == len(segments) and all(map(_segment, segments, parts))


def _segment(pieces: tuple[str, ...], text: str) -> bool:
    """`text` is pieces[0] + anything + pieces[1] + ... + pieces[-1] (`*` between
    pieces): the first and last fixed at the ends, the middle ones found leftmost in
    turn (taking each as early as possible leaves the most room for the rest)."""
    if len(pieces) == 1:
        return pieces[0] == text
    head, *middle, tail = pieces
    end = len(text) - len(tail)
    if end < len(head) or not text.startswith(head) or not text.endswith(tail):
        return False
    at = len(head)
    for piece in middle:
        found = text.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def any_match(patterns: tuple[str, ...], name: str) -> bool:
    return any(matches(p, name) for p in patterns)


def expanded_id(rule_id: str, metric: str) -> str:
    """The id of a pattern rule's result on one concrete metric: `rule[metric]`."""
    return f"{rule_id}[{metric}]"


def template_id(result_id: str) -> str:
    """The rule id an expanded result id (`rule[metric]`) came from; itself otherwise."""
    head, bracket, _ = result_id.partition("[")
    return head if bracket and result_id.endswith("]") else result_id
