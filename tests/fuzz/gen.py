"""Seeded generators of hostile inputs, each case labelled with what gatekeeper must do.

A case is (bytes to write, expected): `expected` is None when the input is well formed
(a verdict, exit 0 or 1), or the set of line numbers at least one of which the error must
name (exit 2). Byte mutants carry no label: any verdict or a one-line exit 2 will do.
Everything comes from `random.Random(seed)`, so a failing case is reproduced by its seed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

# (JSON text, is it a valid step?) — what a hostile writer puts where a step goes
STEPS_OK = [
    *("0", "1", "7", "3.0", "-5", "4611686018427387904", "9007199254740993"),
    *("-9223372036854775808", "9223372036854775807"),  # the int64 ends: differences wrap
]
STEPS_BAD = [
    "true",
    "false",
    '"3"',
    "1e300",
    "9223372036854775808",
    "18446744073709551617",
    "-9223372036854775809",
    "0.5",
    "null",
    '"NaN"',
    "[1]",
    "{}",
    "1" + "0" * 400,
    "NaN",
    "Infinity",
]
VALUES_OK = [
    "0.25",
    "-3",
    "1e-300",
    "true",
    "false",
    '"NaN"',
    '"Infinity"',
    '"-Infinity"',
    "NaN",
    "-Infinity",
    "null",
    "1e308",
    "12345678901234567890",
]
VALUES_BAD = [
    '"0.5"',
    '"1_000"',
    '"abc"',
    '""',
    "[1]",
    '{"a": 1}',
    "1" + "0" * 400,
    "1e400",
    "-1e400",
    '"1e3"',
    "[[[[1]]]]",
]
NAMES = [
    "loss",
    "a\\nb",
    "::warning file=x::pwned",
    "tab\\there",
    'q\\"uote',
    "back\\\\slash",
    "ünï",
    "\\u2028sep",
    "bell\\u0007",
    "%0A",
    "x" * 200,
]


@dataclass
class Case:
    name: str
    data: bytes
    bad_lines: set[int] | None  # None: well formed; else the lines an error may name
    labelled: bool = True  # False for mutants: nobody knows whether they are well formed


def _point(rng: random.Random, bad: bool, record: bool = False) -> tuple[str, str]:
    """A [step, value] pair as JSON texts; when `bad`, exactly one of them is invalid.
    In a miles record a null step is not refused: it makes that metric an error and the
    rest is judged (miles' semantics, tests/miles), so it is not a "bad" token there."""
    step, value = rng.choice(STEPS_OK), rng.choice(VALUES_OK)
    if bad:
        if rng.random() < 0.5:
            step = rng.choice([s for s in STEPS_BAD if not (record and s == "null")])
        else:
            value = rng.choice(VALUES_BAD)
    return step, value


def jsonl_case(seed: int) -> Case:
    """A file of record lines and rows; with probability 1/2 one token is made invalid."""
    rng = random.Random(seed)
    lines: list[str] = []
    bad_line = rng.randrange(1, 9) if rng.random() < 0.5 else None
    truncated = bad_line is None and rng.random() < 0.05
    n_lines = rng.randrange(1, 9)
    if bad_line is not None:
        bad_line = min(bad_line, n_lines)
    for i in range(1, n_lines + 1):
        bad = i == bad_line
        name = json.dumps(rng.choice(NAMES))[1:-1]
        if rng.random() < 0.5:
            # a record line: metric names are r-prefixed so no row shares one (one axis)
            n = rng.randrange(1, 6)
            which = rng.randrange(n)
            pts = [_point(rng, bad and k == which, record=True) for k in range(n)]
            # steps must not repeat oddly across lines? repeats are allowed (stable merge)
            series = ", ".join(f"[{s}, {v}]" for s, v in pts)
            lines.append(f'{{"metric": "r/{name}{i}", "series": [{series}]}}')
        else:
            step, value = _point(rng, bad)
            other = rng.choice(VALUES_OK)
            lines.append(f'{{"step": {step}, "w{name}": {value}, "loss": {other}}}')
    text = "\n".join(lines) + ("" if truncated else "\n")
    bad = {bad_line} if bad_line is not None else ({n_lines} if truncated else None)
    return Case(f"jsonl-{seed}", text.encode(), bad)


HOSTILE_BYTES = [
    b"\x00",
    b"\xff",
    b"\xed\xa0\x80",
    b"[" * 2000,
    b"{" * 300,
    b"9" * 500,
    b"\n",
    b'"',
    b"NaN",
    b"\\ud800",
    b"\r",
    b"::error::x",
    b"1e400",
    b"true",
    b"-",
]


def mutate(rng: random.Random, data: bytes, n: int = 3) -> bytes:
    """`n` random edits: delete, duplicate, replace with hostile bytes, flip a bit."""
    buf = bytearray(data)
    for _ in range(n):
        if not buf:
            buf += rng.choice(HOSTILE_BYTES)
            continue
        at = rng.randrange(len(buf))
        kind = rng.randrange(4)
        if kind == 0:
            del buf[at : at + rng.randrange(1, 8)]
        elif kind == 1:
            buf[at:at] = buf[at : at + rng.randrange(1, 16)]
        elif kind == 2:
            buf[at:at] = rng.choice(HOSTILE_BYTES)
        else:
            buf[at] ^= 1 << rng.randrange(8)
    return bytes(buf)


def jsonl_mutant(seed: int) -> Case:
    rng = random.Random(seed)
    base = jsonl_case(seed * 7919 + 1).data
    return Case(f"jsonl-mutant-{seed}", mutate(rng, base, rng.randrange(1, 6)), None, False)


# -- policies --------------------------------------------------------------------------

CHECKS_OK = [
    "{max: 1}",
    "{min: -2.5}",
    "{abs_max: 1.0e-9}",
    "{between: [0, 1]}",
    "{approx: {value: 0.5, abs: 0.1}}",
    "{finite: true}",
    "{reach: {value: 0.7, by_step: 80}}",
    "{trend: {window: 3, max_slope: 0.1}}",
]
# (check or field text, why it is invalid) — each line of the policy where it is placed
CHECKS_BAD = [
    "{max: .nan}",
    "{min: -.inf}",
    "{between: [.nan, .nan]}",
    "{approx: {value: .nan, abs: 1}}",
    "{trend: {window: 3, max_slope: .nan}}",
    "{fraction: {above: .nan, max: 0.1}}",
    "{max: !foo 1}",
    "{max: " + "9" * 30 + "}",
    "{between: [1, 0]}",
    "{nope: 1}",
    "{max: [" * 70 + "]" * 70 + "}",
    "{max: 1, min: 0}",
    "{abs_max: -1}",
]
STEPS_POLICY = ["all", "first", "last", "[0, 1]", "{from: 0, to: 5}", "{last: 3}"]
EXPRS_OK = ["loss * 2", "abs(loss)", "max(loss, 1)", "-loss", "(loss + 1) / 2"]
EXPRS_BAD = [
    "(" * 250 + "loss" + ")" * 250,
    "-" * 450 + "loss",
    "+".join(["loss"] * 600),
    "loss **",
    "open(loss)",
    "1e400 * loss",
    "`",
    "loss\n::warning::x",
]


def policy_case(seed: int) -> Case:
    """A policy of a few rules; with probability 1/2 one rule has one invalid part."""
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    bad_rule = rng.randrange(n) if rng.random() < 0.5 else None
    lines = ["version: 1", f"name: fuzz-{seed}", "rules:"]
    bad_lines: set[int] = set()
    for i in range(n):
        bad = i == bad_rule
        bad_expr = bad and rng.random() < 0.3
        lines.append(f"  - id: r{i}")
        start = len(lines)
        if bad_expr:
            lines.append(f"    expr: {json.dumps(rng.choice(EXPRS_BAD))}")
        elif rng.random() < 0.2:
            lines.append(f"    expr: {json.dumps(rng.choice(EXPRS_OK))}")
        else:
            lines.append("    metric: loss")
        lines.append(f"    steps: {rng.choice(STEPS_POLICY)}")
        check = rng.choice(CHECKS_BAD) if bad and not bad_expr else rng.choice(CHECKS_OK)
        lines.append(f"    check: {check}")
        if bad:
            bad_lines = set(range(start, len(lines) + 1))
    text = "\n".join(lines) + "\n"
    return Case(f"policy-{seed}", text.encode(), bad_lines if bad_rule is not None else None)


def policy_mutant(seed: int) -> Case:
    rng = random.Random(seed)
    base = policy_case(seed * 104729 + 3).data
    return Case(f"policy-mutant-{seed}", mutate(rng, base, rng.randrange(1, 5)), None, False)


def laughs(levels: int, width: int = 9) -> bytes:
    """YAML 'billion laughs' in a place a policy allows: `levels` anchors in a `when`
    list, each a list of `width` aliases of the one before (width**levels leaves)."""
    anchors = ["&a0 [" + ", ".join(["1"] * width) + "]"]
    anchors += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return (
        "version: 1\nname: lol\nrules:\n  - id: r\n    metric: loss\n    check: {max: 1}\n"
        "    when:\n      config.x:\n        in: [" + ", ".join(anchors) + "]\n"
    ).encode()


# -- expressions -----------------------------------------------------------------------

EXPR_ATOMS = [
    "loss",
    "train/kl",
    "`eval/acc@1`",
    "2",
    "0.5",
    "1e3",
    "abs(",
    "max(",
    "log(",
    "(",
    ")",
    "+",
    "-",
    "*",
    "/",
    ",",
    " ",
    "min(",
    "exp(",
    "`",
    "@",
    "1e999",
    "\n",
]


def expr_text(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(EXPR_ATOMS) for _ in range(rng.randrange(1, 40)))


def valid_expr(rng: random.Random, depth: int = 0) -> str:
    """An expression of the documented grammar, nested at most a few levels."""
    if depth > 4 or rng.random() < 0.3:
        return rng.choice(["loss", "kl", "2", "0.5", "`eval/acc@1`"])
    kind = rng.randrange(4)
    if kind == 0:
        return f"{valid_expr(rng, depth + 1)} {rng.choice('+-*/')} {valid_expr(rng, depth + 1)}"
    if kind == 1:
        return f"-{valid_expr(rng, depth + 1)}"
    if kind == 2:
        return f"({valid_expr(rng, depth + 1)})"
    fn = rng.choice(["abs", "log", "exp", "min", "max"])
    n = 1 if fn in ("abs", "log", "exp") else rng.randrange(2, 4)
    return f"{fn}(" + ", ".join(valid_expr(rng, depth + 1) for _ in range(n)) + ")"


def any_json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value (for config updates and sidecars)."""
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice([1, -2.5, "x", None, True, "a\nb", 10**30])
    if r < 0.75:
        return [any_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {f"k{i}": any_json(rng, depth + 1) for i in range(rng.randrange(3))}
