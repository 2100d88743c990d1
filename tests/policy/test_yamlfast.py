"""The fast policy reader (libyaml, `gatekeeper/yamlfast.py`) against the exact one
(ruamel): the same values (types included), the same line of every node, the same
policy or the same error message -- for every YAML file of the repo, every policy text
in the tests and docs, the fuzz generator's policies and byte mutants, and crafted edge
cases. Where the fast reader is unsure it must fall back (and then the results are equal
by construction); the test also asserts it does take the fast path for ordinary policies.
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import gatekeeper.yamlfile as yamlfile
from gatekeeper.errors import PolicyError
from gatekeeper.policy.loader import load_policy
from gatekeeper.yamlfast import (
    RESOLVER_FIRST,
    RESOLVER_WORDS,
    RESOLVERS_12,
    fast_tree,
    unsure_text,
)
from gatekeeper.yamlfile import ALIAS_BUDGET, TooBig, line_of, node_count, plain, read_yaml
from tests.fuzz import gen
from tests.helpers import REPO

SKIP_DIRS = {".venv", ".git", "node_modules"}


def _repo_yaml_files() -> list[Path]:
    return sorted(
        p for p in REPO.rglob("*.y*ml")
        if p.suffix in (".yaml", ".yml") and not SKIP_DIRS & set(p.relative_to(REPO).parts)
    )


def _policy_texts_in_sources() -> list[str]:
    """Every string constant of the tests that looks like a policy, and every ```yaml
    block of the docs."""
    texts: list[str] = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "rules:" in node.value or "version: 1" in node.value:
                    texts.append(textwrap.dedent(node.value).lstrip())
    for path in sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")]):
        texts += re.findall(r"```ya?ml\n(.*?)```", path.read_text(), re.S)
    return texts


SCALARS = [
    # booleans and nulls, YAML 1.2 against 1.1
    "true", "True", "TRUE", "tRue", "false", "FALSE", "yes", "Yes", "YES", "no", "No",
    "on", "On", "off", "OFF", "y", "Y", "n", "N", "~", "null", "Null", "NULL", "nUll", "",
    # integers
    "0", "-0", "+0", "00", "007", "010", "08", "0o10", "0o", "0o8", "0x1F", "0X1F", "0x",
    "0b101", "0b", "1_000", "1__0", "_1", "1_", "+12", "-12", "123456789012345678",
    "1234567890123456789", "9223372036854775807", "9223372036854775808",
    "99999999999999999999", "-9223372036854775809",
    # floats
    "1e3", "1E3", "1e+3", "1e-3", "1.5e-3", "-1.5", "+1.5", ".5", "-.5", "+.5", ".5e3",
    ".5e+3", "1.", "-1.", "01.5", "1.0e", "1e", "1.e3", "0.0", "-0.0", "+0.0", "1e400",
    "-1e400", "1e-400", "3.14159265358979323846264338", "1.5_0", "1_0.5", "0.1e0001",
    ".inf", "-.inf", "+.inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN", "inf", "nan", "NaN",
    "Infinity", "-Infinity", "1e3x", "1.2.3",
    # sexagesimal, timestamps, merge, value
    "1:30", "1:30:00", "-1:30", "190:20:30", "12:30.5", "2024-01-01", "2024-1-1",
    "2024-01-01 10:00:00", "2024-01-01T10:00:00Z", "2001-12-14t21:59:43.10-05:00", "=",
    "<<", "<<<", "==",
    # strings that look close to something
    "-", "--", "-a", "+a", ".a", "..", "a b", "a#b", "a:b", "http://x.y/z?q=1", "x:",
    "loss * 2", "train/ppo_kl", "0.5x", "7b", "v1.2", "1h", "30s", "5m", "a\u00e9\u4e2d",
    "\u00e9t\u00e9", "@x", "`x`", "%x", "a'b", 'a"b', "a\\b", "!", "&", "*",
]


def _crafted() -> list[str]:
    cases: list[str] = []
    for s in SCALARS:
        for q in (s, f"'{s}'", f'"{s}"'):
            cases += [f"a: {q}\n", f"a: [{q}, x]\n", f"a: {{b: {q}}}\n", f"{q}: 1\nb: 2\n",
                      f"a:\n  - {q}\n  - k: {q}\n"]
    cases += [
        "", "# only a comment\n", "---\n", "---\na: 1\n", "---\na: 1\n...\n",
        "a: 1\n---\nb: 2\n", "%YAML 1.1\n---\na: yes\n", "%YAML 1.2\n---\na: 010\n",
        "%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n", "- a\n- b\n", "just text\n",
        "a: &x 1\nb: *x\n", "a: &x {c: 1}\nb:\n  <<: *x\n  d: 2\n", "a: !!str 1\n",
        "a: !!int '1'\n", "a: !!float 1\n", "a: !foo x\n", "a: ! x\n", "? a\n: 1\n",
        "? [a, b]\n: 1\n", "? {a: b}\n: 1\n", "a: 1\na: 2\n", "a: 1\nb: 2\na: 3\n",
        "1: a\n1.0: b\n", "true: a\n1: b\n", "~: a\nnull: b\n", ": a\n", "a:\nb:\n",
        "a: [a: b, c]\n", "a: [{b: c}, [d]]\n", "a: {b, c: d}\n", "a: {b: }\n", "a: [,]\n",
        "a: b: c\n", "a:\n- 1\n- 2\n", "a:\n  -\n    b: 1\n  -\n    c: 2\n",
        "a: |\n  x\n  y\n", "a: |-\n  x\n\n", "a: |+\n  x\n\n\n", "a: >\n  x\n  y\n\n  z\n",
        "a: >-\n  x\n   y\n  z\n", "a: >+\n  x\n\n", "a: |2\n    x\n  y\n", "a: |\n\n  x\n",
        "a: >\n\n\n  x\n", "a: |\nb: 1\n", "a: |\n  # not a comment\n", "a: 'x\n  y'\n",
        'a: "x\n  y"\n', "a: 'x\n\n  y'\n", "a: x\n  y\n  z\n", "a: x\n\n  y\n",
        "a: x # c\nb: 'y' # d\n", "a: x#y\n", "a: 'it''s'\n", 'a: "q\\"q"\n',
        'a: "\\t\\u00e9\\x41\\/\\N\\_\\L\\P"\n', 'a: "x\\\n  y"\n', "a: b\\c\n",
        "a:\tb\n", "a: b\r\nc: d\r\n", "\ufeffa: 1\n", "a: b\u0085c\n", "a: b\u2028c\n",
        "a: \u0007\n", "a: 1\n\x00", "a: b\n  c: d\n", "a:\n  b: 1\n c: 2\n",
        "  a: 1\n  b: 2\n", "a:\n    - 1\n    - 2\nb: [\n  1,\n  2\n]\n",
        "a: {\n  b: 1,\n  c: 2\n}\n", "a: [1, 2\n", "a: {b: 1\n", "a: ]\n", "a: }\n",
        "a: @b\n", "a: `b\n", "a: %b\n", "a: |x\n", "a: 'x\n", 'a: "x\n', "- a\nb: 1\n",
        "a: 1\n- b\n", "a:\n  - b\n  c: 1\n", "a: [b]c\n", "a: {b: c}d\n", "a: *\n",
        "a: &\n", "a: !\n", "a: &x\n", "x" * 1100 + ": 1\n", "a: " + "y" * 5000 + "\n",
        "a: " + "[" * 40 + "]" * 40 + "\n", "a:\n" + "".join(f"{' ' * (2 * i)}b{i}:\n"
                                                           for i in range(1, 40)) + "  c: 1\n",
        "a: " + "9" * 5000 + "\n", "a: 1\n# end\n", "a: 1\n...\n# after\n",
        "a: 1\n--- \n", "a: 'x'y\n", "a: \"x\"y\n", "a: - b\n", "a: ? b\n", "[a, b]: c\n",
        "{a: b}: c\n", "a: [b, {c: [d, {e: f}]}]\n", "a: \n  b\n", "a:\n  b\n  - c\n",
        "a: -1\nb: - 1\n", "a: [- 1]\n", "a: [-1, -.5, +.5]\n",
        "a: &x [1, 2]\nb: [*x, *x]\nc: *x\n", "a: &x [*x]\n", "a: *x\nb: &x [1]\n",
        "a: &x [1]\nb: &x [2]\nc: *x\n", "a: &x {b: 1}\n*x : 2\n", "a: [&x [1], *x]\n",
        "- &x [1]\n- *x\n", "a: &x\n  - 1\n  - &y [2, *x]\nb: *y\n",
        *(gen.laughs(levels).decode() for levels in (2, 4, 6, 9)),
    ]
    return cases


def _norm(x: Any) -> Any:
    """A value with its types (True vs 1, 1 vs 1.0, -0.0 vs 0.0) and key order kept."""
    if isinstance(x, dict):
        return ("map", [(_norm(k), _norm(v)) for k, v in x.items()])
    if isinstance(x, list):
        return ("seq", [_norm(v) for v in x])
    if isinstance(x, float):
        return ("float", "nan" if math.isnan(x) else repr(x))
    return (type(x).__name__, x)


def _locs(data: Any, loc: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [loc, (*loc, "no-such-key"), (*loc, 10_000)]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _locs(v, (*loc, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _locs(v, (*loc, i))
    return out


def _plain(tree: Any) -> tuple[str, Any]:
    """`plain` of a tree with the loader's budget: the value, or the refusal and its line."""
    try:
        return "ok", _norm(plain(tree, [node_count(tree) + ALIAS_BUDGET]))
    except TooBig as exc:
        return "refused", (str(exc), exc.loc, line_of(tree, exc.loc))


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except PolicyError as exc:
        return "error", str(exc)


def _exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlfile, "fast_tree", lambda text: None)


def _compare(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both readers on `path`: equal trees and lines, equal policies or errors. True when
    the fast reader answered itself."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:  # refused before either reader: only the outcomes compare
        text = ""
    fast = fast_tree(text) if text else None
    with monkeypatch.context() as m:
        _exact(m)
        exact_tree = _outcome(lambda: read_yaml(str(path), fast=True))
        exact_policy = _outcome(lambda: repr(load_policy(str(path))))
    fast_policy = _outcome(lambda: repr(load_policy(str(path))))
    assert fast_policy == exact_policy, path.read_text(errors="replace")[:400]
    if fast is not None:
        assert exact_tree[0] == "ok", (text[:400], exact_tree)
        tree = exact_tree[1]
        fast_plain, exact_plain = _plain(fast), _plain(tree)
        assert fast_plain == exact_plain, text[:400]
        if exact_plain[0] == "ok":  # an expansion refused: its message and line compared
            for loc in _locs(plain(tree)):
                assert line_of(fast, loc) == line_of(tree, loc), (text[:400], loc)
        assert _outcome(lambda: read_yaml(str(path), fast=True)) == ("ok", fast)
    return fast is not None


def test_resolvers_are_ruamels_yaml_1_2_table() -> None:
    from ruamel.yaml.resolver import implicit_resolvers

    ours = [(tag, RESOLVERS_12[tag], "".join(sorted(RESOLVER_FIRST[tag]))) for tag in RESOLVERS_12]
    theirs = [(tag, regexp.pattern, "".join(sorted(c for c in first if c)))
              for versions, tag, regexp, first in implicit_resolvers
              if (1, 2) in versions and tag != "tag:yaml.org,2002:yaml"]
    assert sorted(ours) == sorted(theirs)
    assert set(RESOLVERS_12) == set(RESOLVER_FIRST)
    # the word resolvers: their pattern is an alternation of exactly these words
    for tag, words in RESOLVER_WORDS.items():
        body = re.sub(r"\s", "", RESOLVERS_12[tag]).removeprefix("^(?:").removesuffix(")$")
        assert set(body.split("|")) == words, tag
        assert all(re.compile(RESOLVERS_12[tag], re.X).match(w) for w in words)


def test_unsure_text_is_the_printable_ranges() -> None:
    allowed = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe"
                         "\uff00-\ufffd\U00010000-\U0010ffff]")
    chars = [chr(i) for i in [*range(0x300), *range(0x2000, 0x2100), *range(0xd700, 0xe100),
                              *range(0xfe00, 0x10100), 0x10FFFF]]
    for c in chars:
        for text in (c, "a: " + c, "a: \u00e9" + c):
            assert unsure_text(text) == bool(allowed.search(text)), hex(ord(c))


@pytest.mark.parametrize("path", _repo_yaml_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_yaml_file_of_the_repo(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    took_fast = _compare(path, monkeypatch)
    if "policies" in path.parts and not path.name.endswith(".test.yaml"):
        assert took_fast, "a shipped policy should not need the slow reader"


def test_every_policy_text_in_the_tests_and_docs(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _policy_texts_in_sources()
    assert len(texts) > 50
    fast = 0
    for i, text in enumerate(texts):
        path = tmp_path / f"t{i}.yaml"
        path.write_text(text)
        fast += _compare(path, monkeypatch)
    assert fast > len(texts) * 0.7  # the fast path is the common one (some are fragments)


def test_crafted_edge_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = 0
    cases = _crafted()
    for i, text in enumerate(cases):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(text)
        fast += _compare(path, monkeypatch)
    assert 0 < fast < len(cases)


def test_fuzz_policies_and_mutants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = 0
    for seed in range(300):
        for case in (gen.policy_case(seed), gen.policy_mutant(seed)):
            path = tmp_path / f"{case.name}.yaml"
            path.write_bytes(case.data)
            fast += _compare(path, monkeypatch)
    assert fast > 200  # the unbroken cases and many mutants


@pytest.mark.parametrize("text", [
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: yes}}\n",
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: 010}}\n",
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: 1_000}}\n",
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: 1:30}}\n",
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: .nan}}\n",
    "version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: 1}}\n  - {id: a}\n",
    "version: 1\nname: p\nname: q\nrules: []\n",
])
def test_values_and_errors_match_ruamel(text: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    _compare(path, monkeypatch)


def test_an_ordinary_policy_is_read_without_ruamel(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: p\nrules:\n  - {id: a, metric: m, check: {max: 1}}\n")
    code = (f"from gatekeeper.policy.loader import load_policy\nload_policy({str(path)!r})\n"
            "import sys\nprint(sorted(m for m in sys.modules if m.startswith('ruamel')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "[]"
