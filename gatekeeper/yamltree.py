"""YAML text as a tree with line marks: the one reader of gatekeeper (`load_text`).

libyaml's parser through PyYAML (its pure-Python parser where PyYAML was built without
libyaml: the same library and grammar); its events are composed here, iteratively, into
dicts and lists that carry line marks (`MarkedMap`, `MarkedSeq`), plain scalars resolved
by the YAML 1.2 core schema (null, bool, int, float; everything else is text). Nothing is
ever constructed from a tag. What the reader cannot promise to read as a YAML 1.2 reader
would is refused with file:line and the fix, never guessed: tags, anchors named twice,
merge keys (`<<`), directives (`%YAML`, `%TAG`), a second document (`---`; `...` end
markers after the one document are fine), duplicate or non-scalar keys, numbers YAML 1.1
and 1.2 disagree on (`1_000`, `0b101`), and characters 1.1 reads as line breaks.

Bounds while reading: `check_flow_depth` before parsing and MAX_DEPTH while composing,
MAX_DIGITS for a number as written. `yamlfile` bounds what the tree expands to.
"""

from __future__ import annotations

import math
import re
from typing import Any, NoReturn

import numpy as np

from gatekeeper.errors import PolicyError, one_line, quote

MAX_DEPTH = 64  # policies nest a few levels; deeper is an attack or a generator's bug
MAX_DIGITS = 1000  # a number as written (int() of thousands of digits is slow, then refused)


def check_flow_depth(raw: bytes, shown: str) -> None:
    """Refuse `[[[[...` / `{{{{...` nested deeper than MAX_DEPTH before the parser sees
    it: at once, with the line, in linear numpy time, however long the file (the parser
    would build every level first). Counts every bracket, quoted or not (a text with
    more than MAX_DEPTH unclosed brackets is refused too)."""
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


def load_text(text: str, shown: str, raw: bytes | None = None) -> Any:
    """The one YAML document of `text` as MarkedMap / MarkedSeq / scalars (None when
    the text holds no document); `shown` names the text in errors (a file, `--override`).
    `raw`: the text's UTF-8 bytes, when the caller has them."""
    _check_characters(text, shown)
    _check_directives(text, shown)
    check_flow_depth(text.encode() if raw is None else raw, shown)
    import yaml  # ~10 ms: paid by the first YAML read, not by `import gatekeeper`

    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader  # only its parser runs
    try:
        parser = loader(text)
    except yaml.YAMLError as exc:
        _syntax_error(exc, text, shown)
    try:
        return _Composer(shown, yaml.events).run(parser)
    except yaml.YAMLError as exc:
        _syntax_error(exc, text, shown)
    finally:
        parser.dispose()


def _syntax_error(exc: Exception, text: str, shown: str) -> NoReturn:
    """libyaml's error as one `invalid YAML` line at the line of its mark."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    position = getattr(exc, "position", None)  # a reader error: an offset, no mark
    if mark is not None:
        line: int | None = mark.line + 1
    elif isinstance(position, int):
        line = text.count("\n", 0, position) + 1
    else:
        line = None
    why = one_line(str(problem or getattr(exc, "reason", None) or exc).split("\n  in ")[0])
    raise PolicyError(f"invalid YAML: {why}", file=shown, line=line) from None


_ASCII_REFUSED = re.compile("[^\t\n\r\x20-\x7e]")
_DIRECTIVE = re.compile("^\ufeff?%", re.M)


def _allowed(c: str) -> bool:
    """Printable for YAML 1.2, less NEL, LS and PS (line breaks in YAML 1.1, libyaml's
    grammar, text in 1.2) and a BOM inside the text."""
    o = ord(c)
    return (
        c in "\t\n\r" or 0x20 <= o <= 0x7E or 0xA0 <= o <= 0xD7FF and o not in (0x2028, 0x2029)
        or 0xE000 <= o <= 0xFFFD and o != 0xFEFF or 0x10000 <= o <= 0x10FFFF
    )


def _check_characters(text: str, shown: str) -> None:
    body = text[1:] if text.startswith("\ufeff") else text  # a leading BOM is a BOM
    if body.isascii():
        found = _ASCII_REFUSED.search(body)
        bad = found.group() if found else None
    else:  # distinct characters one by one: a regex of the Unicode ranges costs ~5 ms
        refused = [c for c in set(body) if not _allowed(c)]
        bad = min(refused, key=body.index) if refused else None
    if bad is not None:
        at = text.index(bad, len(text) - len(body))
        raise PolicyError(
            f"character U+{ord(bad):04X} is not allowed (a control character, or a line "
            "break YAML 1.1 and 1.2 read differently); remove it, or write it as an escape "
            f"in a double-quoted string (\\u{ord(bad):04x})",
            file=shown,
            line=text.count("\n", 0, at) + 1,
        )


def _check_directives(text: str, shown: str) -> None:
    """A line starting with `%` is a directive to libyaml, which refuses some (`%YAML
    1.3`) and where its pure-Python parser ignores others: refused alike, with the line."""
    found = _DIRECTIVE.search(text) if "%" in text else None
    if found is not None:
        end = text.find("\n", found.start())
        directive = text[found.start() : end if end >= 0 else len(text)].lstrip("\ufeff")
        raise PolicyError(
            f"YAML directive {quote(directive)} is not supported (gatekeeper reads YAML "
            "1.2 without directives); remove the line",
            file=shown,
            line=text.count("\n", 0, found.start()) + 1,
        )


# The YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2): a plain scalar of one of these
# forms is null, a bool, an int or a float; any other plain scalar is text.
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False,
          "FALSE": False}
_SPECIAL_FLOATS = {
    **{f"{sign}.{inf}": float(f"{sign}inf") for sign in ("", "+", "-")
       for inf in ("inf", "Inf", "INF")},
    ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan,
}
_NUMBER_START = frozenset("+-.0123456789")
_INT = re.compile("[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_BASED = re.compile("0o[0-7]+|0x[0-9a-fA-F]+")
_BASED_11 = re.compile("0b[01]+|0o[0-7]+|0x[0-9a-fA-F]+")


def resolve_plain(value: str) -> Any:
    """A plain (unquoted, untagged) scalar by the YAML 1.2 core schema. ValueError for
    a number longer than MAX_DIGITS, and for one YAML 1.1 reads as a number but 1.2 as
    text (`1_000`, `0b101`, `-0x1F`): which one the author meant cannot be known."""
    if value in _NULLS:
        return None
    if value in _BOOLS:
        return _BOOLS[value]
    if value[0] not in _NUMBER_START:  # most scalars: names, metrics, descriptions
        return value
    decimal, based = _INT.fullmatch(value), _BASED.fullmatch(value)
    if decimal or based or _FLOAT.fullmatch(value):
        if len(value) > MAX_DIGITS:
            raise ValueError(f"a number of {len(value)} characters; at most {MAX_DIGITS} are read")
        return int(value) if decimal else int(value, 0) if based else float(value)
    if value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    bare = value.replace("_", "")
    unsigned = bare[1:] if bare[:1] in ("-", "+") else bare
    if _BASED_11.fullmatch(unsigned) or "_" in value and (
        _INT.fullmatch(bare) or _FLOAT.fullmatch(bare)
    ):
        raise ValueError(
            f"{quote(value)} is a number in YAML 1.1 but text in YAML 1.2; write it as a "
            "1.2 number (digits without underscores, 0x/0o without a sign), or quote it for text"
        )
    return value


class MarkedMap(dict[Any, Any]):
    """A mapping with the 1-based line of itself and of each key."""

    __slots__ = ("line", "key_lines")

    def __init__(self, line: int):
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}


class MarkedSeq(list[Any]):
    """A sequence with the 1-based line of itself and of each item."""

    __slots__ = ("line", "item_lines")

    def __init__(self, line: int):
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


_NO_KEY = object()
_CORE_TAG = "tag:yaml.org,2002:"


class _Composer:
    """One document's parser events as MarkedMap / MarkedSeq / scalars, iteratively
    (nesting is bounded by MAX_DEPTH, never a RecursionError). An alias is the anchored
    node itself, so `node_count` counts it once and `plain` bounds its copies."""

    def __init__(self, shown: str, events: Any):
        self.shown = shown
        self.ev = events
        self.root: Any = None
        self.documents = 0
        self.stack: list[list[Any]] = []  # open containers: [node, key awaiting its value]
        self.anchors: dict[str, tuple[Any, int]] = {}  # name: (node, line)

    def fail(self, why: str, line: int) -> NoReturn:
        raise PolicyError(why, file=self.shown, line=line)

    def run(self, parser: Any) -> Any:
        ev = self.ev
        while True:
            event = parser.get_event()
            kind = type(event)
            line = event.start_mark.line + 1
            if kind is ev.ScalarEvent:
                self.add(self.scalar(event, line), line, event.anchor)
            elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
                mapping = kind is ev.MappingStartEvent
                self.open(event, line, MarkedMap(line) if mapping else MarkedSeq(line))
            elif kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
                self.stack.pop()
            elif kind is ev.AliasEvent:
                self.alias(event.anchor, line)
            elif kind is ev.DocumentStartEvent:
                self.documents += 1
                if self.documents > 1:
                    self.fail("a second YAML document (---); a file holds one document: "
                              "remove the --- line, or split the file", line)
            elif kind is ev.StreamEndEvent:
                return self.root

    def scalar(self, event: Any, line: int) -> Any:
        if event.tag is not None:
            self.tagged(event.tag, line)
        if not event.implicit[0]:  # quoted or a block scalar: text as written
            return event.value
        if event.value == "<<" and self.expects_key():
            self.fail("merge keys (<<) are not supported: write the keys out", line)
        try:
            return resolve_plain(event.value)
        except ValueError as exc:
            self.fail(str(exc), line)

    def open(self, event: Any, line: int, node: MarkedMap | MarkedSeq) -> None:
        if event.tag is not None:
            self.tagged(event.tag, line)
        if len(self.stack) >= MAX_DEPTH:
            self.fail(f"nested deeper than {MAX_DEPTH} levels", line)
        self.add(node, line, event.anchor)
        self.stack.append([node, _NO_KEY])

    def alias(self, name: str, line: int) -> None:
        if name not in self.anchors:
            self.fail(f"alias *{name} names no anchor &{name} written before it", line)
        node = self.anchors[name][0]
        if any(node is top[0] for top in self.stack):
            self.fail(f"alias *{name} is inside the node &{name} it names (recursive)", line)
        self.add(node, line, None)

    def add(self, node: Any, line: int, anchor: str | None) -> None:
        if anchor is not None:
            if anchor in self.anchors:
                self.fail(f"anchor &{anchor} is defined twice (first on line "
                          f"{self.anchors[anchor][1]}); give the second another name", line)
            self.anchors[anchor] = (node, line)
        if not self.stack:
            self.root = node
            return
        top = self.stack[-1]
        parent = top[0]
        if isinstance(parent, MarkedSeq):
            parent.append(node)
            parent.item_lines.append(line)
        elif top[1] is _NO_KEY:
            self.key(parent, node, line)
            top[1] = node
        else:
            parent[top[1]] = node
            top[1] = _NO_KEY

    def key(self, parent: MarkedMap, node: Any, line: int) -> None:
        if isinstance(node, (MarkedMap, MarkedSeq)):
            self.fail("a mapping key must be text or a number, not a "
                      f"{'mapping' if isinstance(node, dict) else 'list'}", line)
        if node in parent.key_lines:
            self.fail(f"invalid YAML: duplicate key {quote(node)} (first on line "
                      f"{parent.key_lines[node]}); keep one", line)
        parent.key_lines[node] = line

    def expects_key(self) -> bool:
        return bool(self.stack) and isinstance(self.stack[-1][0], MarkedMap) and (
            self.stack[-1][1] is _NO_KEY
        )

    def tagged(self, tag: str, line: int) -> NoReturn:
        written = "!!" + tag.removeprefix(_CORE_TAG) if tag.startswith(_CORE_TAG) else tag
        self.fail(f"YAML tag {quote(written)} is not supported (gatekeeper builds nothing "
                  "from tags); write the plain value", line)
