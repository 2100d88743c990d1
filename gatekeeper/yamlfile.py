"""Bounds on what a YAML tree may hold, so a hostile policy is refused, not obeyed.

Depth, alias expansion and numbers: `check_flow_depth` before parsing (ruamel's scanner
is quadratic in nested flow brackets), `plain` while converting (a budget of nodes, a
depth limit, no custom tags), `out_of_range` after (no NaN or infinite number, integers
within int64).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gatekeeper.errors import PolicyError, one_line, quote

MAX_DEPTH = 64  # policies nest a few levels; deeper is an attack or a generator's bug
ALIAS_BUDGET = 100_000  # nodes copied through aliases (a shared `when:` block is tens)


def check_flow_depth(raw: bytes, shown: str) -> None:
    """Refuse `[[[[...` / `{{{{...` nested deeper than MAX_DEPTH before ruamel sees it:
    its scanner looks ahead through a whole flow collection and checks every open level
    per token — quadratic (2,000 brackets took 4 s; 100,000 would never end), before the
    composer's max_depth can stop it. Counts every bracket, quoted or not (a text with
    more than MAX_DEPTH unclosed brackets is refused too), in linear numpy time."""
    codes = np.frombuffer(raw, dtype=np.uint8)
    opens = (codes == ord("[")) | (codes == ord("{"))
    closes = (codes == ord("]")) | (codes == ord("}"))
    where = np.flatnonzero(opens | closes)
    if where.size <= MAX_DEPTH:
        return
    total = np.cumsum(np.where(opens[where], 1, -1))
    # depth that never goes below zero: stray closers (in a comment) cannot hide openers
    depth = total - np.minimum.accumulate(np.minimum(total, 0))
    deep = np.flatnonzero(depth > MAX_DEPTH)
    if deep.size:
        at = int(where[deep[0]])
        raise PolicyError(
            f"brackets nested deeper than {MAX_DEPTH} levels (byte {at})",
            file=shown,
            line=raw.count(b"\n", 0, at) + 1,
        )


class TooBig(Exception):
    """plain() went past its depth or alias budget; `loc` is where."""

    def __init__(self, why: str, loc: tuple[Any, ...]):
        super().__init__(why)
        self.loc = loc


def plain(node: Any, budget: list[int] | None = None, _loc: tuple[Any, ...] = ()) -> Any:
    """ruamel's commented containers and scalar subclasses as plain Python values.

    Containers reached again through an alias are copied again (plain values do not
    share), so `budget` ([nodes left]) bounds the copying; depth is bounded by MAX_DEPTH
    (also what stops a self-referencing alias, `&a [*a]`). Keys become strings when they
    are not (a tagged or complex key): never an unhashable key, never a crash.
    """
    if budget is None:
        budget = [ALIAS_BUDGET * 20]
    if len(_loc) > MAX_DEPTH:
        raise TooBig(f"nested deeper than {MAX_DEPTH} levels (a recursive alias?)", _loc)
    budget[0] -= 1
    if budget[0] < 0:
        raise TooBig("aliases expand to too many nodes (a YAML 'billion laughs'?)", _loc)
    if isinstance(node, dict):
        return {_key(k): plain(v, budget, (*_loc, _key(k))) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v, budget, (*_loc, i)) for i, v in enumerate(node)]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    tag = getattr(getattr(node, "tag", None), "value", None)  # ruamel's TaggedScalar
    raise TooBig(f"unsupported YAML tag {quote(tag or type(node).__name__)}", _loc)


def _key(k: Any) -> Any:
    if isinstance(k, (bool, int, float)) or k is None:
        return plain(k)
    if isinstance(k, str):
        return str(k)
    tag = getattr(getattr(k, "tag", None), "value", None)
    shown = f"{tag} {getattr(k, 'value', '')}" if tag else type(k).__name__
    return one_line(shown)[:80]  # a tagged or complex key: shown, then refused as unknown


def node_count(tree: Any) -> int:
    """Nodes of the tree as written (each anchored node once): the budget's base."""
    seen: set[int] = set()
    stack = [tree]
    n = 0
    while stack:
        node = stack.pop()
        n += 1
        if isinstance(node, (dict, list)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(node.values() if isinstance(node, dict) else node)
    return n


def out_of_range(data: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first number no policy may hold, with why: a NaN or infinite float (a
    `max: .nan` rule can never fail), or an integer outside int64 (steps, counts)."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:
        loc, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return loc, (
                f"a policy number must be finite, got {quote(node)}; NaN never compares "
                "false and infinity is no bound (leave the bound out instead)"
            )
        if isinstance(node, int) and not isinstance(node, bool) and not (
            -(2**63) <= node < 2**63
        ):
            return loc, f"a policy number must fit int64, got {quote(node)}"
        if isinstance(node, dict):
            stack.extend(((*loc, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*loc, i), v) for i, v in enumerate(node))
    return None
