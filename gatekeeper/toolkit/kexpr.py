"""`gatekeeper test -k EXPR`: choose test cases by name, as pytest's -k does.

EXPR is words joined by `and`, `or`, `not` and parentheses; a word matches a case when
it is a substring of the case's name or of its file's name, ignoring case. `not` binds
tightest, then `and`, then `or`. Parsed here, never evaluated as code."""

from __future__ import annotations

import re
from collections.abc import Callable

from gatekeeper.errors import UsageError

Match = Callable[[str], bool]
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def compile_k(expr: str) -> Match:
    """A predicate on the text "FILE::NAME"; UsageError naming what is wrong with EXPR."""
    tokens = _TOKEN.findall(expr)
    if not tokens:
        raise UsageError("test -k: an empty expression selects nothing; give a name or drop -k")
    parser = _Parser(tokens, expr)
    match = parser.either()
    if parser.pos < len(tokens):
        parser.fail(f"unexpected {tokens[parser.pos]!r}")
    return match


class _Parser:
    def __init__(self, tokens: list[str], expr: str):
        self.tokens, self.expr, self.pos = tokens, expr, 0

    def fail(self, what: str) -> None:
        raise UsageError(
            f"test -k {self.expr!r}: {what}; write words joined by and, or, not and (...)"
        )

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        word = self.peek()
        if word is None:
            self.fail("the expression ends too early")
        self.pos += 1
        return str(word)

    def either(self) -> Match:
        parts = [self.both()]
        while self.peek() == "or":
            self.take()
            parts.append(self.both())
        return parts[0] if len(parts) == 1 else (lambda t: any(p(t) for p in parts))

    def both(self) -> Match:
        parts = [self.unary()]
        while self.peek() == "and":
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else (lambda t: all(p(t) for p in parts))

    def unary(self) -> Match:
        word = self.take()
        if word == "not":
            inner = self.unary()
            return lambda t: not inner(t)
        if word == "(":
            inner = self.either()
            if self.peek() != ")":
                self.fail("a '(' is not closed")
            self.take()
            return inner
        if word in ("and", "or", ")"):
            self.fail(f"{word!r} where a name should be")
        needle = word.lower()
        return lambda t: needle in t.lower()
