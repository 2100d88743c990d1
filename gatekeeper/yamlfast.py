"""A fast reader for the common policy file: libyaml's C parser (PyYAML's `CSafeLoader`)
composed into plain dicts and lists with line marks, scalars resolved by the YAML 1.2
core schema exactly as ruamel (the exact reader, `yamlfile.read_yaml`) resolves them.

Why: ruamel's pure-Python scanner is most of a policy's load time: a 20-rule policy
read 28 -> 20 ms CPU with this reader (import included; PyYAML's import is ~12 of the
20, libyaml's parse under 1 ms), a 1,000-rule one 1.9 -> 0.2 s (docs/limits.md).

Exactness first: `fast_tree` returns None -- and the caller reads the file with ruamel --
on anything it is not sure resolves identically:
- characters where YAML 1.1 (libyaml) and 1.2 (ruamel) differ or that are rare in
  policies: tabs, CR, NEL, LS, PS, a BOM, control characters; backslash escapes in a file
  with double quotes;
- directives (`%YAML`, `%TAG`), more than one document, a root that is not a mapping;
- tags, anchored scalars, an alias before or inside its anchor, merge keys (an alias
  of a container is the same object, as in ruamel, so the alias budget counts alike);
- keys that are not scalars, duplicate keys (ruamel's error message is the one shown);
- a plain scalar that any YAML 1.2 implicit resolver of ruamel's would match (numbers,
  booleans, null, timestamps, `<<`, `=`) unless it is one of the few exact forms below;
- nesting deeper than FAST_DEPTH;
- any error libyaml reports (ruamel then reports it, with its own words and mark).

`tests/policy/test_yamlfast.py` loads every policy, test file and fuzz case of the repo
and crafted edge cases through both readers and asserts equal trees, line marks and
errors, and that RESOLVERS_12 is ruamel's own YAML 1.2 resolver table.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

FAST_DEPTH = 32  # policies nest a few levels; deeper goes to ruamel (max_depth, errors)

# Text the fast path leaves to ruamel: anything outside printable ASCII/Unicode with LF
# line ends (YAML 1.1 breaks lines at NEL/LS/PS, 1.2 does not; tabs and CR are rare).
# ASCII text by one small regex; the distinct characters of other text one by one (a
# regex of the Unicode ranges costs ~5 ms to compile, more than the whole parse).
_ASCII_UNSURE = re.compile("[^\n\x20-\x7e]")


def _printable(c: str) -> bool:
    o = ord(c)
    return (
        c == "\n" or 0x20 <= o <= 0x7E or 0xA0 <= o <= 0x2027 or 0x202A <= o <= 0xD7FF
        or 0xE000 <= o <= 0xFEFE or 0xFF00 <= o <= 0xFFFD or 0x10000 <= o <= 0x10FFFF
    )


def unsure_text(text: str) -> bool:
    if text.isascii():
        return _ASCII_UNSURE.search(text) is not None
    return not all(_printable(c) for c in set(text))


# ruamel's YAML 1.2 implicit resolvers (ruamel/yaml/resolver.py, the entries for (1, 2)):
# a plain scalar matching one of these is not a plain string in ruamel.
RESOLVERS_12 = {
    "tag:yaml.org,2002:bool": r"""^(?:true|True|TRUE|false|False|FALSE)$""",
    "tag:yaml.org,2002:float": r"""^(?:
         [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    "tag:yaml.org,2002:int": r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0o?[0-7_]+
        |[-+]?[0-9_]+
        |[-+]?0x[0-9a-fA-F_]+)$""",
    "tag:yaml.org,2002:merge": r"^(?:<<)$",
    "tag:yaml.org,2002:null": r"""^(?: ~
        |null|Null|NULL
        | )$""",
    "tag:yaml.org,2002:timestamp": r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
        |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
        (?:[Tt]|[ \t]+)[0-9][0-9]?
        :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
        (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
    "tag:yaml.org,2002:value": r"^(?:=)$",
}
# ruamel tries a resolver only on a scalar whose first character is in its list
RESOLVER_FIRST = {
    "tag:yaml.org,2002:bool": "tTfF",
    "tag:yaml.org,2002:float": "-+0123456789.",
    "tag:yaml.org,2002:int": "-+0123456789",
    "tag:yaml.org,2002:merge": "<",
    "tag:yaml.org,2002:null": "~nN",  # and the empty scalar
    "tag:yaml.org,2002:timestamp": "0123456789",
    "tag:yaml.org,2002:value": "=",
}


@cache
def _resolver(tag: str) -> re.Pattern[str]:
    return re.compile(RESOLVERS_12[tag], re.X)  # compiled when first needed (~1 ms each)


# Four of the resolvers match a fixed set of words (the test holds these to their
# patterns); the three that match forms (numbers, timestamps) are compiled when needed.
RESOLVER_WORDS = {
    "tag:yaml.org,2002:bool": {"true", "True", "TRUE", "false", "False", "FALSE"},
    "tag:yaml.org,2002:merge": {"<<"},
    "tag:yaml.org,2002:null": {"~", "null", "Null", "NULL", ""},
    "tag:yaml.org,2002:value": {"="},
}
_WORDS = frozenset().union(*RESOLVER_WORDS.values())
_FORMS = [tag for tag in RESOLVERS_12 if tag not in RESOLVER_WORDS]


def _special(value: str) -> bool:
    """Some YAML 1.2 implicit resolver of ruamel's matches the plain scalar `value`."""
    if value in _WORDS:
        return True
    first = value[:1]
    return any(
        _resolver(tag).match(value)
        for tag in _FORMS
        if first and first in RESOLVER_FIRST[tag]
    )


# The exact forms resolved here (anything else a resolver matches goes to ruamel): what
# ruamel's round-trip constructor makes of them, as `yamlfile.plain` turns it into a value.
_BOOLS = {"true": True, "True": True, "TRUE": True,
          "false": False, "False": False, "FALSE": False}
_NULLS = ("", "~", "null", "Null", "NULL")
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]{0,17})")  # no underscores, no leading zeros
_FLOAT = re.compile(
    r"[-+]?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{0,17}(?:[eE][-+]?[0-9]{1,3})?|[eE][-+]?[0-9]{1,3})"
)


class Unsure(Exception):
    """The fast path cannot promise ruamel's result: read the file with ruamel."""


class MarkedMap(dict[Any, Any]):
    """A mapping with the 1-based line of itself and of each key (ruamel's `lc`)."""

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


def scalar(value: str) -> Any:
    """A plain (unquoted, untagged) scalar as ruamel's YAML 1.2 round-trip load gives it
    (after `plain`), or Unsure."""
    if value in _BOOLS:
        return _BOOLS[value]
    if value in _NULLS:
        return None
    if _INT.fullmatch(value):
        return int(value)
    if _FLOAT.fullmatch(value):
        return float(value)
    if _special(value):
        raise Unsure(value)
    return value


def fast_tree(text: str) -> MarkedMap | None:
    """The document's root mapping, or None when only ruamel can say (see the module)."""
    if unsure_text(text) or ("\\" in text and '"' in text):
        return None
    try:
        return _compose(text)
    except Unsure:
        return None
    except Exception as exc:  # libyaml's own errors: ruamel words them, with its marks
        import yaml

        if isinstance(exc, yaml.YAMLError):
            return None
        raise


def _compose(text: str) -> MarkedMap | None:
    try:
        import yaml
    except ImportError:  # a declared dependency, but never required: ruamel reads all
        raise Unsure("no PyYAML") from None
    c_loader = getattr(yaml, "CSafeLoader", None)
    if c_loader is None:  # PyYAML built without libyaml: its Python parser is no faster
        raise Unsure("no libyaml")
    # the C parser's events, composed here without recursion (its own composer recurses
    # in C, unbounded) and without its YAML 1.1 resolver
    loader = c_loader(text)
    try:
        return _build(loader)
    finally:
        loader.dispose()


_NO_KEY = object()


def _build(loader: Any) -> MarkedMap | None:
    import yaml

    ev = yaml.events
    root: Any = None
    documents = 0
    # open containers: [container, pending key (_NO_KEY: a key comes next), key's line]
    stack: list[list[Any]] = []
    # anchored containers: (node, its line). An alias is the very node, as in ruamel's
    # composer (so `node_count` and the alias budget count alike), and the line of an
    # item that is an alias is the anchored node's line, as ruamel records it.
    anchors: dict[str, tuple[Any, int]] = {}
    while True:
        event = loader.get_event()
        kind = type(event)
        if kind is ev.ScalarEvent:
            if event.anchor is not None or event.tag is not None:
                raise Unsure("tag or anchored scalar")  # ruamel: ScalarBoolean, ...
            node: Any = scalar(event.value) if event.style == "" else event.value
            line = event.start_mark.line + 1
        elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
            if event.tag is not None:
                raise Unsure("tag")
            line = event.start_mark.line + 1
            node = MarkedMap(line) if kind is ev.MappingStartEvent else MarkedSeq(line)
            if event.anchor is not None:
                if event.anchor in anchors:
                    raise Unsure("anchor defined twice")
                anchors[event.anchor] = (node, line)
        elif kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
            stack.pop()
            continue
        elif kind is ev.AliasEvent:
            if event.anchor not in anchors:
                raise Unsure("undefined alias")
            node, line = anchors[event.anchor]
            if any(node is top[0] for top in stack):
                raise Unsure("recursive alias")
            if stack and isinstance(stack[-1][0], MarkedMap) and stack[-1][1] is _NO_KEY:
                raise Unsure("alias as a key")
        elif kind is ev.DocumentStartEvent:
            documents += 1
            if documents > 1 or event.version is not None or event.tags:
                raise Unsure("directives or documents")
            continue
        elif kind is ev.StreamEndEvent:
            return root if isinstance(root, MarkedMap) else None
        else:  # stream start, document end
            continue
        if not stack:
            root = node
        else:
            top = stack[-1]
            parent = top[0]
            if isinstance(parent, MarkedSeq):
                parent.append(node)
                parent.item_lines.append(line)
            elif top[1] is _NO_KEY:
                if isinstance(node, (MarkedMap, MarkedSeq)) or node in parent:
                    raise Unsure("complex or duplicate key")
                top[1], top[2] = node, line
            else:
                parent[top[1]] = node
                parent.key_lines[top[1]] = top[2]
                top[1] = _NO_KEY
        if kind is not ev.AliasEvent and isinstance(node, (MarkedMap, MarkedSeq)):
            if len(stack) >= FAST_DEPTH:
                raise Unsure("deep")
            stack.append([node, _NO_KEY, 0])


__all__ = ["FAST_DEPTH", "MarkedMap", "MarkedSeq", "RESOLVERS_12", "Unsure", "fast_tree"]
