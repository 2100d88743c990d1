"""The one YAML reader (`gatekeeper/yamltree.py`; files through `yamlfile.py`): plain
scalars as the YAML 1.2 core schema defines them, the line of every node, and a file:line
error naming the fix for what it does not read (tags, merge keys, directives, a second
document, ...). The same answers from PyYAML's pure-Python parser, for an install whose
PyYAML was built without libyaml. Every consumer (policy, daemon config, test file,
--override, --config) is in test_yaml_consumers.py.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import gatekeeper.yamlfile as yamlfile
from gatekeeper.errors import PolicyError
from gatekeeper.yamlfile import MAX_DEPTH, MarkedMap, line_of, load_text, to_plain
from tests.fuzz import gen

# The core schema's table (yaml.org/spec/1.2.2, 10.3.2), and text for everything else:
# the YAML 1.1 booleans, sexagesimals and timestamps included.
CORE = [
    ("null", None), ("Null", None), ("NULL", None), ("~", None),
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("FALSE", False),
    ("0", 0), ("-0", 0), ("+12", 12), ("-12", -12), ("010", 10), ("007", 7),
    ("9223372036854775808", 9223372036854775808), ("0o17", 15), ("0x1F", 31), ("0xff", 255),
    ("1.5", 1.5), ("-1.5", -1.5), ("+.5", 0.5), (".5", 0.5), ("1.", 1.0), ("1e3", 1000.0),
    ("1E3", 1000.0), ("1e-3", 0.001), (".5e3", 500.0), ("-0.0", -0.0), ("1e400", math.inf),
    (".inf", math.inf), ("+.Inf", math.inf), ("-.INF", -math.inf),
    ("tRue", "tRue"), ("nUll", "nUll"), ("yes", "yes"), ("No", "No"), ("on", "on"),
    ("off", "off"), ("y", "y"), ("1:30", "1:30"), ("190:20:30", "190:20:30"),
    ("2024-01-01", "2024-01-01"), ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
    ("0o", "0o"), ("0x", "0x"), ("0o8", "0o8"), ("1e", "1e"), ("1.2.3", "1.2.3"),
    ("inf", "inf"), ("nan", "nan"), ("NaN", "NaN"), ("-.nan", "-.nan"), ("=", "="),
    ("<<<", "<<<"), ("-a", "-a"), ("..", ".."), ("0.5x", "0.5x"), ("7b", "7b"),
    ("1h", "1h"), ("30s", "30s"), ("train/ppo_kl", "train/ppo_kl"), ("a b", "a b"),
    ("a#b", "a#b"), ("http://x.y/z?q=1", "http://x.y/z?q=1"), ("\u00e9t\u00e9", "\u00e9t\u00e9"),
]


def read(text: str) -> Any:
    return to_plain(load_text(text, "t.yaml"), "t.yaml")


def refusal(text: str) -> str:
    with pytest.raises(PolicyError) as err:
        read(text)
    return str(err.value)


def same(a: Any, b: Any) -> bool:
    """Equal with types (True is not 1, 1 is not 1.0, -0.0 is not 0.0) and NaN equal."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and repr(a) == repr(b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("written, value", CORE, ids=[w for w, _ in CORE])
def test_plain_scalars_are_the_yaml_1_2_core_schema(written, value):
    for text, get in [
        (f"a: {written}\n", lambda d: d["a"]),
        (f"a: [{written}, x]\n", lambda d: d["a"][0]),
        (f"a:\n  - k: {written}\n", lambda d: d["a"][0]["k"]),
    ]:
        assert same(get(read(text)), value), text
    assert read("a:\nb: [x, ]\n") == {"a": None, "b": ["x"]}  # the empty scalar is null
    assert math.isnan(read("a: .nan\n")["a"]) and math.isnan(read("a: .NaN\n")["a"])


@pytest.mark.parametrize("written", ["1", "true", "null", "1_000", "0x1F", ".inf", "-", "<<"])
def test_quoted_and_block_scalars_are_text(written):
    assert read(f"a: '{written}'\nb: \"{written}\"\n") == {"a": written, "b": written}
    assert read(f"a: |\n  {written}\n")["a"] == f"{written}\n"
    assert read("a: ''\n") == {"a": ""}


def test_keys_are_resolved_like_values():
    assert read("1: a\n1.5: b\nnull: c\nx: d\n'2': e\n") == {
        1: "a", 1.5: "b", None: "c", "x": "d", "2": "e"
    }


@pytest.mark.parametrize("written", ["1_000", "1_0.5", "0b101", "-0b1", "-0x1F", "+0o17", "1_"])
def test_numbers_yaml_1_1_reads_otherwise_are_refused_not_guessed(written):
    # YAML 1.1 (and gatekeeper's reader before) took these for numbers, 1.2 for text: a
    # `max: 1_000` read as text would change meaning silently wherever any value fits
    message = refusal(f"version: 1\nx: {written}\n")
    assert message.startswith(f't.yaml:2: "{written}" is a number in YAML 1.1 but text in YAML 1.2')
    assert "quote it for text" in message
    assert read(f"x: '{written}'\n") == {"x": written}


def test_a_number_too_long_to_read_is_refused_at_its_line():
    assert refusal("a: 1\nb: " + "9" * 5000 + "\n") == (
        "t.yaml:2: a number of 5000 characters; at most 1000 are read"
    )
    assert read("a: " + "9" * 400 + "\n")["a"] == int("9" * 400)  # out_of_range's job


def test_line_marks_of_keys_items_and_missing_places():
    tree = load_text(
        "# head\nversion: 1\nrules:\n  - id: a\n    check: {max: 1}\n\n"
        "  - id: b\n    when:\n      - x\n      - [y,\n         z]\n", "t.yaml"
    )
    assert line_of(tree, ()) == 2
    assert line_of(tree, ("version",)) == 2
    assert line_of(tree, ("rules",)) == 3
    assert line_of(tree, ("rules", 0)) == 4
    assert line_of(tree, ("rules", 0, "check", "max")) == 5
    assert line_of(tree, ("rules", 1)) == 7
    assert line_of(tree, ("rules", 1, "when", 1, 1)) == 11
    # a place the tree does not have: its deepest existing node
    assert line_of(tree, ("rules", 1, "when", 7)) == 8
    assert line_of(tree, ("rules", 5, "id")) == 3
    assert line_of(tree, ("nope",)) == 2


def test_aliases_share_the_anchored_node_and_are_marked_where_used():
    tree = load_text("a: &x {c: 1}\nb: *x\nc:\n  - &n 2\n  - *n\n", "t.yaml")
    assert tree["b"] is tree["a"] and tree["c"] == [2, 2]
    assert line_of(tree, ("b",)) == 2 and line_of(tree, ("b", "c")) == 1
    assert line_of(tree, ("c", 1)) == 5
    plain = read("a: &x {c: 1}\nb: *x\n")
    assert plain == {"a": {"c": 1}, "b": {"c": 1}} and plain["a"] is not plain["b"]


def test_alias_expansion_beyond_the_budget_is_refused_at_its_line():
    message = refusal(gen.laughs(9).decode())
    assert message.startswith("t.yaml:9: rules[0].when.config.x.in")
    assert "aliases expand to too many nodes" in message
    assert len(read(gen.laughs(3, 3).decode())["rules"][0]["when"]["config.x"]["in"]) == 3


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "---\n...\n"])
def test_no_document_is_none(text):
    assert load_text(text, "t.yaml") is None


@pytest.mark.parametrize(
    "text",
    ["a: 1\n...\n", "a: 1\n...\n...\n", "---\na: 1\n...\n", "a: 1\n...\n# after\n",
     "\ufeffa: 1\n", "a: 1\r\nb: \t2\r\n"],
)
def test_one_document_with_end_markers_is_read(text):
    tree = load_text(text, "t.yaml")
    assert isinstance(tree, MarkedMap) and tree["a"] == 1


REFUSED = [
    # (text, line, words of the message)
    ("a: 1\ncheck: {max: !!bool maybe}\n", 2, 'YAML tag "!!bool" is not supported'),
    ("a: !!int 0x\n", 1, 'YAML tag "!!int"'),
    ("a: !!omap x\n", 1, 'YAML tag "!!omap"'),
    ("a: 1\nrules: !!python/object/apply:os.system [\"true\"]\n", 2,
     'YAML tag "!!python/object/apply:os.system"'),
    ("a: !foo x\n", 1, 'YAML tag "!foo"'),
    ("!foo a: 1\n", 1, 'YAML tag "!foo"'),
    ("a: ! x\n", 1, 'YAML tag "!"'),
    ("a: !!str 1\n", 1, 'YAML tag "!!str"'),
    ("a: 1\nx: &a {<<: *a}\n", 2, "merge keys (<<) are not supported: write the keys out"),
    ("a: &x {c: 1}\nb:\n  d: 2\n  <<: *x\n", 4, "merge keys (<<)"),
    ("%YAML 1.3\n---\na: 1\n", 1, 'YAML directive "%YAML 1.3" is not supported'),
    ("%YAML 1.2\n---\na: 1\n", 1, "remove the line"),
    ("# c\n%TAG !e! tag:e.com,2000:\n---\na: !e!x 1\n", 2, 'YAML directive "%TAG'),
    ("%FOO bar\n---\na: 1\n", 1, 'YAML directive "%FOO bar"'),
    ("a: 1\n---\nb: 2\n", 2, "a second YAML document (---); a file holds one document"),
    ("a: 1\n...\n---\nb: 2\n", 3, "a second YAML document"),
    ("a: 1\n--- \n", 2, "a second YAML document"),
    ("a: 1\n...\nb: 2\n", 3, "invalid YAML"),
    ("a: 1\nb: 2\na: 3\n", 3, 'invalid YAML: duplicate key "a" (first on line 1); keep one'),
    ("a: {b: 1, b: 2}\n", 1, 'duplicate key "b"'),
    ("a: 1\n? [a, b]\n: 1\n", 2, "a mapping key must be text or a number, not a list"),
    ("{a: b}: c\n", 1, "not a mapping"),
    ("a: &x {c: 1}\n*x : 2\n", 2, "a mapping key must be text or a number"),
    ("a: &x 1\nb: &x 2\nc: *x\n", 2, "anchor &x is defined twice (first on line 1)"),
    ("a: *x\nb: &x [1]\n", 1, "alias *x names no anchor &x written before it"),
    ("a:\n  - &x [1, *x]\n", 2, "alias *x is inside the node &x it names"),
    ("a: b\u2028c\n", 1, "character U+2028 is not allowed"),
    ("a: 1\nb: c\u0085d\n", 2, "character U+0085"),
    ("a: 1\nb: \x07\n", 2, "character U+0007"),
    ("a: 1\nb: x\ufeff\n", 2, "character U+FEFF"),
    ("a: [1, 2\n", 2, "invalid YAML: did not find expected ',' or ']'"),
    ("a: @b\n", 1, "invalid YAML"),
    ("a: b: c\n", 1, "invalid YAML"),
    ("a:\n" + "".join(f"{'  ' * i} b{i}:\n" for i in range(1, 70)) + "    c: 1\n",
     MAX_DEPTH + 1, f"nested deeper than {MAX_DEPTH} levels"),
    ("a: " + "[" * 70 + "]" * 70 + "\n", 1, f"brackets nested deeper than {MAX_DEPTH}"),
]


@pytest.mark.parametrize("text, line, words", REFUSED, ids=[t[:30] for t, _, _ in REFUSED])
def test_what_the_reader_does_not_read_is_an_error_at_its_line(text, line, words, capfd):
    message = refusal(text)
    assert message.startswith(f"t.yaml:{line}: "), message
    assert words in message, message
    assert "\n" not in message
    assert capfd.readouterr() == ("", "")  # no library warning, ever


@pytest.fixture(params=["libyaml", "pure"])
def parser(request, monkeypatch):
    """Both of PyYAML's parsers: libyaml's (CSafeLoader) and the pure-Python one."""
    import yaml

    if request.param == "pure":
        monkeypatch.setattr(yaml, "CSafeLoader", None)
    elif getattr(yaml, "CSafeLoader", None) is None:
        pytest.skip("PyYAML without libyaml")
    return request.param


def test_both_parsers_give_the_same_values_lines_and_refusals(parser):
    for written, value in CORE:
        assert same(read(f"a: {written}\n")["a"], value), written
    test_line_marks_of_keys_items_and_missing_places()
    test_aliases_share_the_anchored_node_and_are_marked_where_used()
    for text, line, words in REFUSED:
        if words.startswith("invalid YAML:") and "duplicate" not in words:
            words = "invalid YAML"  # libyaml and PyYAML word syntax errors differently
        message = refusal(text)
        assert message.startswith(f"t.yaml:{line}: ") and words in message, (parser, message)


def test_nothing_is_constructed_from_a_tag(tmp_path, monkeypatch):
    import yaml

    # the composer sees events only: no constructor (safe or not) ever runs
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a YAML constructor ran")

    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_object", never)
    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_document", never)
    flag = tmp_path / "ran"
    text = f'a: !!python/object/apply:os.system ["touch {flag}"]\n'
    assert "YAML tag" in refusal(text)
    assert read("a: [1, {b: c}]\n") == {"a": [1, {"b": "c"}]}
    assert not flag.exists()


def test_read_yaml_names_the_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nb: !!float 2\n")
    with pytest.raises(PolicyError, match=r"^.*p\.yaml:2: YAML tag"):
        yamlfile.read_yaml(str(path))
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(PolicyError, match=r"p\.yaml: not UTF-8 text \(byte 3\)"):
        yamlfile.read_yaml(str(path))
