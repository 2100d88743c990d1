"""Every YAML gatekeeper reads goes through the one reader, so what it refuses is refused
alike everywhere: a policy (`gatekeeper check`), a daemon config (`gatekeeper serve
--check-config`), a policy test file (`gatekeeper test`), an `--override` check value and
a `--config` value. Each is exit 2 with one stderr line naming file:line (or the flag) —
never exit 70, never a library warning; and `...` end markers after the one document
are accepted by every consumer. One case per consumer also runs in a real child process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz.gen import laughs
from tests.fuzz.harness import run_cli
from tests.helpers import gatekeeper

POLICY = "version: 1\nname: p\nrules:\n  - id: r\n    metric: a\n    check: {max: {V}}\n"
TESTS = 'tests:\n  - name: passes\n    series: {a: "0.5x3"}\n    chunk: {V}\n    others: pass\n'
DAEMON = "state: {V}\ntargets:\n  - source: r.jsonl\n    policies: [p.yaml]\n"


@dataclass(frozen=True)
class Consumer:
    name: str
    file: str  # the file the hazard is written into
    text: str  # a valid document; {V} is a value on line `line`
    line: int
    value: str  # {V} in the valid document
    argv: tuple[str, ...]  # run in the case's directory; relative paths

    def write(self, where: Path, value: str | None = None, head: str = "", tail: str = "") -> None:
        (where / "p.yaml").write_text(POLICY.replace("{V}", "1"))
        (where / "r.jsonl").write_text('{"step": 0, "a": 0.5}\n')
        body = self.text.replace("{V}", self.value if value is None else value)
        (where / self.file).write_text(head + body + tail)

    def run(self, where: Path) -> tuple[int, str]:
        rc, _, err, _ = run_cli(inside(where, self.argv))
        return rc, err

    def lines(self) -> int:
        return self.text.count("\n")


CONSUMERS = [
    Consumer("policy", "p.yaml", POLICY, 6, "1", ("check", "r.jsonl", "-p", "p.yaml", "-q")),
    Consumer("daemon config", "gatekeeper.yaml", DAEMON, 1, "state.json",
             ("serve", "--config", "gatekeeper.yaml", "--check-config")),
    Consumer("test file", "p.test.yaml", TESTS, 4, "2", ("test", "p.test.yaml")),
]

# a value that is not read: (value as written, words of the error)
VALUES = [
    ("!!bool maybe", 'YAML tag "!!bool" is not supported'),
    ("!!int 0x", 'YAML tag "!!int"'),
    ("!!omap x", 'YAML tag "!!omap"'),
    # (an --override's reason starts at the first colon: the tag is then !!python/object/apply)
    ('!!python/object/apply:os.system ["true"]', 'YAML tag "!!python/object/apply'),
    ("!foo 1", 'YAML tag "!foo"'),
    ("{<<: {a: 1}}", "merge keys (<<) are not supported"),
    ("{a: 1, a: 2}", 'invalid YAML: duplicate key "a"'),
    ("{[a]: 1}", "a mapping key must be text or a number"),
    ("[&x 1, &x 2]", "anchor &x is defined twice"),
    ("&x [*x]", "alias *x is inside the node &x it names"),
    ("*nope", "alias *nope names no anchor"),
    ("1_000", '"1_000" is a number in YAML 1.1 but text in YAML 1.2'),
]
# the document around: (head, tail, line of the error given the valid document's lines)
DOCUMENTS = [
    ("%YAML 1.3\n---\n", "", lambda n: 1, 'YAML directive "%YAML 1.3" is not supported'),
    ("%TAG !e! tag:e.com,2000:\n---\n", "", lambda n: 1, 'YAML directive "%TAG'),
    ("", "---\nx: 1\n", lambda n: n + 1, "a second YAML document (---)"),
    ("", "...\n---\n", lambda n: n + 2, "a second YAML document (---)"),
    ("", "x: &a {<<: *a}\n", lambda n: n + 1, "merge keys (<<)"),
    ("", "x: 1\nx: 2\n", lambda n: n + 2, 'invalid YAML: duplicate key "x"'),
    ("", "? [a, b]\n: 1\n", lambda n: n + 1, "a mapping key must be text or a number"),
    ("", "x: &a 1\ny: &a 2\n", lambda n: n + 2, "anchor &a is defined twice"),
    ("", "x: " + laughs(9).decode().split("in: ")[1], lambda n: n + 1, "aliases expand"),
]


def inside(where: Path, argv: tuple[str, ...]) -> list[str]:
    """`argv` with its file names as paths in `where` (run_cli runs in this process)."""
    return [str(where / a) if a.endswith((".yaml", ".jsonl")) else a for a in argv]


def assert_refused(rc: int, err: str, where: str, words: str) -> None:
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("gatekeeper: error: "), err  # no warning
    assert where in err and words in err, err


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_the_valid_document_and_end_markers_after_it_are_read(consumer, tmp_path):
    for tail in ("", "...\n", "...\n...\n", "...\n# the end\n"):
        consumer.write(tmp_path, tail=tail)
        rc, err = consumer.run(tmp_path)
        assert (rc, err) == (0, ""), (tail, err)


@pytest.mark.parametrize("value, words", VALUES, ids=[v for v, _ in VALUES])
@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_value_the_reader_does_not_read_is_exit_2_at_its_line(consumer, value, words,
                                                               tmp_path):
    consumer.write(tmp_path, value=value)
    rc, err = consumer.run(tmp_path)
    assert_refused(rc, err, f"{consumer.file}:{consumer.line}: ", words)


@pytest.mark.parametrize("head, tail, line, words", DOCUMENTS, ids=[w for *_, w in DOCUMENTS])
@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_document_the_reader_does_not_read_is_exit_2_at_its_line(consumer, head, tail, line,
                                                                  words, tmp_path):
    consumer.write(tmp_path, head=head, tail=tail)
    rc, err = consumer.run(tmp_path)
    assert_refused(rc, err, f"{consumer.file}:{line(consumer.lines())}: ", words)


OVERRIDE = ("check", "r.jsonl", "-p", "p.yaml", "-q", "--override")


@pytest.mark.parametrize(
    "value, words",
    [*VALUES, ("%YAML 1.3", "YAML directive"), ("1\n---\n2", "a second YAML document")],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_an_override_value_the_reader_does_not_read_is_exit_2(value, words, tmp_path):
    CONSUMERS[0].write(tmp_path)
    override = f"p/r=max={value}:MLA kernels differ"
    rc, _, err, _ = run_cli([*inside(tmp_path, OVERRIDE), override])
    line = 2 if "---" in value else 1
    assert_refused(rc, err, f"--override {override!r}: cannot read value", words)
    assert f": --override:{line}: " in err
    rc, _, err, _ = run_cli([*inside(tmp_path, OVERRIDE), "p/r=max=0.1:tighter"])
    assert rc == 1, err  # the reader reads a plain value: 0.5 > 0.1 fails


@pytest.mark.parametrize("value, words", VALUES[:6], ids=[v for v, _ in VALUES[:6]])
def test_a_config_value_the_reader_does_not_read_is_exit_2(value, words, tmp_path):
    CONSUMERS[0].write(tmp_path)
    argv = inside(tmp_path, ("check", "r.jsonl", "-p", "p.yaml", "-q"))
    rc, _, err, _ = run_cli([*argv, "--config", f"lora_rank={value}"])
    assert_refused(rc, err, f"--config 'lora_rank={value}': cannot read value", words)
    assert run_cli([*argv, "--config", "lora_rank=8", "--config", "note='a: b'"])[0] == 0


# -- the same, in real child processes: one case per consumer -------------------------

EXPLOIT = '!!python/object/apply:os.system ["touch ran"]'


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_python_tag_is_refused_by_the_real_program(consumer, tmp_path):
    consumer.write(tmp_path, value=EXPLOIT)
    done = gatekeeper(*consumer.argv, cwd=tmp_path)
    assert_refused(done.returncode, done.stderr, f"{consumer.file}:{consumer.line}: ",
                   'YAML tag "!!python/object/apply:os.system"')
    assert not (tmp_path / "ran").exists()


def test_an_override_with_a_reused_anchor_is_refused_by_the_real_program(tmp_path):
    CONSUMERS[0].write(tmp_path)
    done = gatekeeper(*OVERRIDE, "p/r=between=[&x 0, &x 1]:why", cwd=tmp_path)
    assert_refused(done.returncode, done.stderr, "--override:1: ", "anchor &x is defined twice")
