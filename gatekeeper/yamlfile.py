"""YAML files with line marks, for every config gatekeeper reads (policies, policy tests,
the daemon config, export naming): `read_yaml`, `line_of`, and the one error format
(`file:line: field: problem, got value`), and the `Duration` type of config values.

Policy files are read with `read_yaml(path, fast=True)`: libyaml through `yamlfast` when
it can promise ruamel's exact values and marks (~10x faster per rule), ruamel otherwise;
both trees answer `is_mapping`, `line_of` and `plain` alike.

Bounds on what a YAML tree may hold, so a hostile file is refused, not obeyed: at most
MAX_BYTES; depth, alias expansion and numbers: `check_flow_depth` before parsing (ruamel's scanner
is quadratic in nested flow brackets), `plain` while converting (a budget of nodes, a
depth limit, no custom tags), `out_of_range` after (no NaN or infinite number, integers
within int64).
"""

from __future__ import annotations

import math
import os
import re
import sys
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field, ValidationError

from gatekeeper.errors import PolicyError, one_line, quote
from gatekeeper.safe_open import open_regular
from gatekeeper.yamlfast import MarkedMap, MarkedSeq, fast_tree

MAX_BYTES = 64 << 20
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


def display_path(path: str) -> str:
    """A path as reports show it: relative to the working directory when inside it."""
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute)
    return absolute if rel.startswith("..") else rel


def read_yaml(path: str, fast: bool = False) -> Any:
    """Parse one YAML file, keeping line information; errors carry file:line.

    ruamel's round-trip tree (CommentedMap, ...) by default. `fast`: a policy file's
    tree may instead come from libyaml (`yamlfast`: plain dicts and lists with lines, the
    same values and marks; it falls back to ruamel on anything it is not sure of), so
    callers test `is_mapping`, never a ruamel type."""
    shown = display_path(path)
    text = _read_text(path, shown)
    if fast:
        tree = fast_tree(text)
        if tree is not None:
            return tree
    return _ruamel_load(text, shown)


def _read_text(path: str, shown: str) -> str:
    try:
        with open_regular(path, lambda why: PolicyError(why, file=shown)) as fh:
            raw = fh.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise PolicyError(
                f"policy file is larger than {MAX_BYTES >> 20} MiB; split it", file=shown
            )
        # A whole string, not the file object: ruamel's stream reader re-copies its
        # buffer per chunk, quadratic on a long scalar (a 10 MB description took 47 s).
        text = raw.decode("utf-8")
        check_flow_depth(raw, shown)
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text (byte {exc.start})", file=shown) from None
    except OSError as exc:
        raise PolicyError(f"cannot read policy: {exc.strerror or exc}", file=shown) from None
    return text


def _ruamel_load(text: str, shown: str) -> Any:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    yaml.max_depth = MAX_DEPTH
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = str(exc.problem or exc.context or "invalid YAML").split("\n  in ")[0]
        problem = one_line(problem)
        raise PolicyError(f"invalid YAML: {problem}", file=shown, line=line) from None
    except YAMLError as exc:
        problem = one_line(str(exc).split("\n  in ")[0])
        raise PolicyError(f"invalid YAML: {problem}", file=shown) from None
    except RecursionError:
        raise PolicyError(f"nested deeper than {MAX_DEPTH} levels", file=shown) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # ruamel converts tagged and plain scalars with int()/float(): a 5,000-digit
        # integer or `!!float rules` fails there, without a mark
        long_number = re.search(r"\d{4000,}", text)
        line = text.count("\n", 0, long_number.start()) + 1 if long_number else None
        raise PolicyError(
            f"invalid YAML value: {one_line(str(exc))[:200]}", file=shown, line=line
        ) from None


def is_mapping(tree: Any) -> bool:
    """A YAML tree's root is a mapping (ruamel's CommentedMap or the fast MarkedMap)."""
    return isinstance(tree, dict)


def _ruamel_containers() -> tuple[Any, Any]:
    """ruamel's commented containers, when ruamel is loaded (else no tree holds one)."""
    comments = sys.modules.get("ruamel.yaml.comments")
    if comments is None:
        return (), ()
    return comments.CommentedMap, comments.CommentedSeq


def line_of(tree: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest node on `loc` that exists in the YAML tree."""
    line: int | None = None
    node = tree
    cmap, cseq = _ruamel_containers()
    if isinstance(node, (MarkedMap, MarkedSeq)):
        line = node.line
    elif isinstance(node, (cmap, cseq)):
        line = node.lc.line + 1
    for part in loc:
        if isinstance(node, MarkedMap) and _has_key(node, part):
            line = node.key_lines[part]
            node = node[part]
        elif isinstance(node, MarkedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        elif isinstance(node, cmap) and _has_key(node, part):
            line = node.lc.key(part)[0] + 1
            node = node[part]
        elif isinstance(node, cseq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    return line


def _has_key(node: dict[Any, Any], part: Any) -> bool:
    try:
        return part in node
    except TypeError:  # an unhashable key from a tagged YAML node
        return False


def dotted(loc: tuple[Any, ...]) -> str:
    """`rules[2].check.abs_max`: a location as a person finds it in the file."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = one_line(str(part))[:80]
            out += f".{text}" if out else text
    return out


def exactly_one(a: object, b: object, message: str) -> None:
    """A config model's validator: of two optional fields, exactly one is given. The
    ValueError becomes a `validation_error` line at the model's place in the file."""
    if (a is None) == (b is None):
        raise ValueError(message)


def validation_error(
    exc: ValidationError, tree: Any, shown: str, prefix: tuple[Any, ...] = ()
) -> PolicyError:
    """Pydantic's errors as one line of `file:line: field: problem, got value` each."""
    lines: list[str] = []
    first_line: int | None = None
    for err in exc.errors(include_url=False):
        loc = tuple(
            p
            for p in (*prefix, *err["loc"])
            if not (isinstance(p, str) and p.startswith(("function-", "literal[")))
        )
        where = line_of(tree, loc) if tree is not None else None
        first_line = first_line or where
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        if err["type"] == "missing":
            msg = "is required"
        elif not isinstance(got, (dict, list)) and got is not None and "got" not in msg:
            msg += f", got {quote(got)}"
        msg = one_line(msg)
        field = dotted(loc) or "(top level)"
        location = f"{shown}:{where}: " if where else f"{shown}: "
        lines.append(f"{location}{field}: {msg}")
    if len(lines) == 1:
        return PolicyError(lines[0])
    # one line: an error must not spill over lines a CI log reads one by one
    return PolicyError(f"{len(lines)} problems in {shown}: " + " | ".join(lines))


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def seconds(raw: Any) -> Any:
    """`30`, `30s`, `5m`, `4h`, `1d`, `250ms` as seconds (float): a pydantic
    BeforeValidator for durations in config files."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a duration like 30s, 5m or 4h, got {raw!r}")
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        m = _DURATION.match(raw)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2) or "s"]
    raise ValueError(f"expected a duration like 30s, 5m or 4h, got {raw!r}")


Duration = Annotated[float, BeforeValidator(seconds), Field(ge=0)]
PositiveDuration = Annotated[float, BeforeValidator(seconds), Field(gt=0)]
