"""YAML files with line marks, for every config gatekeeper reads (policies, policy tests,
the daemon config, export naming; `--override` and `--config` values through `load_text`):
`read_yaml`, `line_of`, `to_plain`, the one error format (`file:line: field: problem, got
value`), and the `Duration` type of config values. The reader itself is `yamltree`.

Bounds, so a hostile file is refused, not obeyed: at most MAX_BYTES; depth, brackets and
long numbers while reading (`yamltree`); `plain` while converting (a budget of nodes
copied through aliases, depth through aliases), `out_of_range` after (no NaN or infinite
number, integers within int64).
"""

from __future__ import annotations

import math
import os
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError

from gatekeeper.errors import PolicyError, one_line, quote
from gatekeeper.safe_open import open_regular
from gatekeeper.yamltree import MAX_DEPTH, MarkedMap, MarkedSeq, load_text

MAX_BYTES = 64 << 20
ALIAS_BUDGET = 100_000  # nodes copied through aliases (a shared `when:` block is tens)


def read_yaml(path: str, what: str = "policy") -> Any:
    """The one YAML document of a file (see the module); every error names file:line and,
    where the file could not be read, `what` it is (a policy, a config, a mapping)."""
    shown = display_path(path)
    raw = _read_bytes(path, shown, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text (byte {exc.start})", file=shown) from None
    return load_text(text, shown, raw)


def _read_bytes(path: str, shown: str, what: str) -> bytes:
    try:
        with open_regular(path, lambda why: PolicyError(why, file=shown)) as fh:
            raw: bytes = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"cannot read {what}: {exc.strerror or exc}", file=shown) from None
    if len(raw) > MAX_BYTES:
        raise PolicyError(
            f"{what} file is larger than {MAX_BYTES >> 20} MiB; split it", file=shown
        )
    return raw


class TooBig(Exception):
    """plain() went past its depth or alias budget; `loc` is where."""

    def __init__(self, why: str, loc: tuple[Any, ...]):
        super().__init__(why)
        self.loc = loc


def plain(node: Any, budget: list[int] | None = None, _loc: tuple[Any, ...] = ()) -> Any:
    """The reader's tree as plain dicts, lists and scalars.

    Containers reached again through an alias are copied again (plain values do not
    share), so `budget` ([nodes left]) bounds the copying; depth is bounded by MAX_DEPTH.
    """
    if budget is None:
        budget = [ALIAS_BUDGET * 20]
    if len(_loc) > MAX_DEPTH:
        raise TooBig(f"nested deeper than {MAX_DEPTH} levels", _loc)
    budget[0] -= 1
    if budget[0] < 0:
        raise TooBig("aliases expand to too many nodes (a YAML 'billion laughs'?)", _loc)
    if isinstance(node, dict):
        return {k: plain(v, budget, (*_loc, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v, budget, (*_loc, i)) for i, v in enumerate(node)]
    return node  # None, bool, int, float or str, as the reader resolved it


def to_plain(tree: Any, shown: str) -> Any:
    """`plain` of a whole tree, its alias budget ALIAS_BUDGET nodes beyond the tree as
    written; going past it (or past MAX_DEPTH through aliases) is an error at its line."""
    try:
        return plain(tree, [node_count(tree) + ALIAS_BUDGET])
    except TooBig as exc:
        raise PolicyError(
            f"{dotted(exc.loc) or '(top level)'}: {exc}", file=shown, line=line_of(tree, exc.loc)
        ) from None


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


def is_mapping(tree: Any) -> bool:
    """A YAML tree's root is a mapping."""
    return isinstance(tree, dict)


def line_of(tree: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest node on `loc` that exists in the YAML tree."""
    node = tree
    line = node.line if isinstance(node, (MarkedMap, MarkedSeq)) else None
    for part in loc:
        if isinstance(node, MarkedMap) and part in node:
            line = node.key_lines[part]
            node = node[part]
        elif isinstance(node, MarkedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        else:
            break
    return line


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
    BeforeValidator for durations in config files, and the one duration grammar of the
    CLI's flags and the source URLs (`late=15s`). NaN and the infinities are not one."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a duration like 30s, 5m or 4h, got {raw!r}")
    if isinstance(raw, (int, float)):
        if not math.isfinite(raw):
            raise ValueError(f"expected a duration like 30s, 5m or 4h, got {raw!r}")
        return float(raw)
    if isinstance(raw, str):
        m = _DURATION.match(raw)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2) or "s"]
    raise ValueError(f"expected a duration like 30s, 5m or 4h, got {raw!r}")


Duration = Annotated[float, BeforeValidator(seconds), Field(ge=0)]
PositiveDuration = Annotated[float, BeforeValidator(seconds), Field(gt=0)]
