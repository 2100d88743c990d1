"""Derived metrics: `expr: "perf/rollout_time / perf/train_time"` on a rule.

A small tokenizer and recursive-descent parser turn the text into a tree that is
evaluated with numpy over the input metrics aligned on their common steps. Nothing but
the documented grammar is accepted; Python's eval is never involved.

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/") unary)*
    unary   := "-" unary | atom
    atom    := NUMBER | METRIC | FUNC "(" expr ("," expr)* ")" | "(" expr ")"

A METRIC is a name like `train/loss` or `perf/rollout_time` (letters, digits, `_`, `.`
and `/` between name parts), or any text in backticks: `` `eval/acc@1` ``. A `/` with
spaces around it, or before a number, divides: `a / b`, `a/2`.
FUNC is abs, log, exp (one argument) or min, max (two or more, elementwise).

Bounds, so no expression can exhaust the stack: at most MAX_TOKENS tokens and a tree at
most MAX_DEPTH deep (parentheses, unary minuses and chains such as a+b+c... all count).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.errors import quote
from gatekeeper.model import Series
from gatekeeper.statedata import StateDataError, decode_fields, encode

MAX_TOKENS = 1000
MAX_DEPTH = 64
UNARY_FUNCS = {"abs": np.abs, "log": np.log, "exp": np.exp}
NARY_FUNCS = {"min": np.minimum, "max": np.maximum}
_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}

_PART = r"[A-Za-z_][A-Za-z0-9_.]*"
_TOKEN = re.compile(
    rf"""(?P<ws>\s+)
    |(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<name>{_PART}(?:/{_PART})*)
    |`(?P<quoted>[^`]+)`
    |(?P<op>[-+*/(),])""",
    re.VERBOSE,
)


class ExprError(ValueError):
    """An expression does not parse; the message names the column and what was expected."""


@dataclass(frozen=True)
class Node:
    op: str  # "num", "metric", "neg", one of + - * /, or a function name
    args: tuple[Node, ...] = ()
    value: float = 0.0
    name: str = ""
    depth: int = 1  # of the tree below: evaluation recurses this deep


@dataclass(frozen=True)
class Token:
    kind: str  # num, name, quoted, op, end
    text: str
    col: int  # 1-based


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        if len(out) > MAX_TOKENS:
            raise ExprError(f"expression is longer than {MAX_TOKENS} tokens; split it")
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(
                f"unexpected character {quote(text[pos])} at column {pos + 1} in {quote(text)}"
            )
        kind = m.lastgroup or ""
        if kind != "ws":
            value = m.group("quoted") if kind == "quoted" else m.group(0)
            out.append(Token("name" if kind == "quoted" else kind, value, pos + 1))
        pos = m.end()
    out.append(Token("end", "", len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.level = 0  # recursion depth of expr(): parentheses, unary minus, calls

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, tok: Token, expected: str) -> ExprError:
        seen = "the end" if tok.kind == "end" else repr(tok.text[:40])
        return ExprError(
            f"expected {expected} at column {tok.col}, got {seen} in {quote(self.text)}"
        )

    def node(self, op: str, args: tuple[Node, ...]) -> Node:
        """A tree node, refused once the tree is deeper than MAX_DEPTH (the parser's own
        recursion is bounded the same way: it nests once per level it builds)."""
        depth = 1 + max(a.depth for a in args)
        if depth > MAX_DEPTH:
            raise ExprError(
                f"expression nests deeper than {MAX_DEPTH} levels at column {self.peek().col} "
                f"in {quote(self.text)}; simplify it"
            )
        return Node(op, args, depth=depth)

    def enter(self) -> None:
        self.level += 1
        if self.level > MAX_DEPTH:
            raise ExprError(
                f"expression nests deeper than {MAX_DEPTH} levels at column {self.peek().col} "
                f"in {quote(self.text)}; simplify it"
            )

    def expect(self, op: str) -> None:
        tok = self.take()
        if tok.kind != "op" or tok.text != op:
            raise self.fail(tok, repr(op))

    def parse(self) -> Node:
        node = self.expr()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "an operator or the end")
        return node

    def expr(self) -> Node:
        self.enter()
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in "+-":
            op = self.take().text
            node = self.node(op, (node, self.term()))
        self.level -= 1
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in "*/":
            op = self.take().text
            node = self.node(op, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek().kind == "op" and self.peek().text == "-":
            self.take()
            self.enter()
            node = self.node("neg", (self.unary(),))
            self.level -= 1
            return node
        return self.atom()

    def atom(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            value = float(tok.text)
            if not math.isfinite(value):
                raise ExprError(f"number {quote(tok.text)} at column {tok.col} is out of range")
            return Node("num", value=value)
        if tok.kind == "op" and tok.text == "(":
            node = self.expr()
            self.expect(")")
            return node
        if tok.kind != "name":
            raise self.fail(tok, "a number, a metric name, a function or '('")
        nxt = self.peek()
        if not (nxt.kind == "op" and nxt.text == "("):
            return Node("metric", name=tok.text)
        return self.call(tok)

    def call(self, tok: Token) -> Node:
        if tok.text not in UNARY_FUNCS and tok.text not in NARY_FUNCS:
            known = ", ".join([*UNARY_FUNCS, *NARY_FUNCS])
            raise ExprError(
                f"unknown function {tok.text!r} at column {tok.col}; known: {known}"
            )
        self.expect("(")
        args = [self.expr()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        want_one = tok.text in UNARY_FUNCS
        if want_one != (len(args) == 1):
            need = "one argument" if want_one else "two or more arguments"
            raise ExprError(f"{tok.text}() takes {need}, got {len(args)} at column {tok.col}")
        return self.node(tok.text, tuple(args))


@dataclass(frozen=True)
class Expr:
    """A parsed derived metric: its text, tree and input metrics (in first-use order)."""

    text: str
    tree: Node
    metrics: tuple[str, ...]

    def evaluate(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Values at aligned points; inputs are equal-length arrays by metric name."""
        with np.errstate(all="ignore"):  # log(0), x/0: NaN/Inf, judged as an error downstream
            return np.asarray(_eval(self.tree, inputs), dtype=np.float64)


def _eval(node: Node, inputs: Mapping[str, np.ndarray]) -> np.ndarray | float:
    if node.op == "num":
        return node.value
    if node.op == "metric":
        return inputs[node.name]
    args = [_eval(a, inputs) for a in node.args]
    if node.op == "neg":
        return np.negative(args[0])
    if node.op in _BINARY:
        return _BINARY[node.op](args[0], args[1])
    if node.op in UNARY_FUNCS:
        return UNARY_FUNCS[node.op](args[0])
    out = args[0]
    for a in args[1:]:
        out = NARY_FUNCS[node.op](out, a)
    return out


def _metrics(node: Node) -> list[str]:
    if node.op == "metric":
        return [node.name]
    return [m for a in node.args for m in _metrics(a)]


def parse_expr(text: str) -> Expr:
    """Parse a derived-metric expression; ExprError says where it went wrong."""
    if not text.strip():
        raise ExprError("expr is empty; write e.g. 'perf/rollout_time / perf/train_time'")
    tree = _Parser(text).parse()
    metrics = tuple(dict.fromkeys(_metrics(tree)))
    if not metrics:
        raise ExprError(
            f"expr {quote(text)} reads no metric; a derived metric needs at least one"
        )
    return Expr(text, tree, metrics)


@dataclass
class Aligner:
    """Feeds a derived metric incrementally: buffers each input's points until every input
    has moved past a step, then emits the steps all inputs share (others are dropped)."""

    expr: Expr
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    step_key: str | None = None

    def to_state(self) -> dict[str, Any]:
        """The buffered input points, as plain data (statedata)."""
        return {
            "steps": {m: encode(a) for m, a in self.steps.items()},
            "values": {m: encode(a) for m, a in self.values.items()},
            "step_key": self.step_key,
        }

    def restore(self, data: Any, where: str) -> None:
        """Take what `to_state` saved; StateDataError when it is not of that shape."""
        arrays = dict[str, np.ndarray]
        fields = decode_fields(
            data, {"steps": arrays, "values": arrays, "step_key": str | None}, where
        )
        if set(fields["steps"]) != set(fields["values"]) or not set(fields["steps"]) <= set(
            self.expr.metrics
        ):
            raise StateDataError(f"{where}: buffered inputs are not this expression's")
        self.steps, self.values = fields["steps"], fields["values"]
        self.step_key = fields["step_key"]

    def feed(self, series: Mapping[str, Series]) -> tuple[np.ndarray, np.ndarray] | None:
        """Fold new points of the inputs; the newly complete (steps, values), if any."""
        for m in self.expr.metrics:
            s = series.get(m)
            if s is None or not len(s):
                continue
            self.step_key = self.step_key or s.step_key
            old = self.steps.get(m)
            self.steps[m] = s.steps if old is None else np.concatenate([old, s.steps])
            self.values[m] = s.values if old is None else np.concatenate([self.values[m], s.values])
        if len(self.steps) < len(self.expr.metrics):
            return None
        horizon = (
            min(int(st[-1]) for st in self.steps.values() if st.size)
            if all(st.size for st in self.steps.values())
            else None
        )
        if horizon is None:
            return None
        common: np.ndarray | None = None
        for st in self.steps.values():
            done = _distinct_sorted(st[st <= horizon])
            common = done if common is None else _intersect_sorted(common, done)
        assert common is not None
        inputs = {}
        for m, st in self.steps.items():
            inputs[m] = self.values[m][np.searchsorted(st, common)]
            keep = st > horizon
            self.steps[m], self.values[m] = st[keep], self.values[m][keep]
        if not common.size:
            return None
        return common, self.expr.evaluate(inputs)


def _distinct_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted steps without repeats (series are sorted by step; a step may repeat)."""
    if a.size < 2:
        return a
    return a[np.concatenate([[True], a[1:] != a[:-1]])]


def _intersect_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # np.intersect1d re-sorts and hashes; both inputs are sorted and distinct already.
    if not a.size or not b.size:
        return a[:0]
    idx = np.minimum(np.searchsorted(b, a), b.size - 1)
    return a[b[idx] == a]


def missing_inputs(expr: Expr, available: list[str]) -> str:
    """Why a derived metric has no points in a finished run, for its ERROR message."""
    missing = [m for m in expr.metrics if m not in available]
    if missing:
        return f"derived metric {expr.text!r}: input {', '.join(missing)} not in the run"
    return f"derived metric {expr.text!r}: inputs {', '.join(expr.metrics)} share no step"
