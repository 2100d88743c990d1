"""`gatekeeper test`: shipped packs' own tests, the notation, diffs, exit codes, JUnit."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
import xmlschema

from gatekeeper.errors import PolicyError
from gatekeeper.toolkit.notation import NotationError, expand
from gatekeeper.toolkit.policytest import run_file
from tests.helpers import REPO, gatekeeper, write_policy

SHIPPED_TESTS = sorted((REPO / "policies").rglob("*.test.yaml"))


def test_every_shipped_pack_has_tests():
    packs = {p for p in (REPO / "policies").rglob("*.yaml") if not p.name.endswith(".test.yaml")}
    tested = {p.with_name(p.name.replace(".test.yaml", ".yaml")) for p in SHIPPED_TESTS}
    assert packs <= tested, f"packs without a *.test.yaml: {sorted(map(str, packs - tested))}"


@pytest.mark.parametrize("path", SHIPPED_TESTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_pack_tests_pass(path):
    results = run_file(str(path))
    assert results, "a test file with no tests"
    failed = [f"{r.where}: {r.name}\n" + "\n".join(r.problems) for r in results if not r.passed]
    assert not failed, "\n".join(failed)


def test_notation_matches_promtool_expansion():
    assert expand("1+1x3") == [1, 2, 3, 4]
    assert expand("5-2x2 7x1") == [5, 3, 1, 7, 7]
    assert expand("_ _x2 stale 1") == [None, None, None, None, 1]
    nan, inf, ninf = expand("NaN Inf -Inf")
    assert math.isnan(nan) and inf == math.inf and ninf == -math.inf
    assert expand("1e-9+1e-9x1") == [1e-9, 2e-9]
    with pytest.raises(NotationError):  # a failing number read in linear time (was quadratic)
        expand("1" * 200_000 + "x")
    with pytest.raises(NotationError, match="cannot read '1\\+x3'"):
        expand("1+x3")


POLICY = """
version: 1
name: p
rules:
  - id: small
    metric: loss
    check: {max: 1}
"""


def test_a_wrong_expectation_prints_a_diff_at_the_test_line_and_exits_1(tmp_path):
    write_policy(tmp_path / "p.yaml", POLICY)
    tests = write_policy(
        tmp_path / "p.test.yaml",
        """
        tests:
          - name: right
            series: {loss: "0.5 2"}
            expect: {small: {status: fail, step: 1}}
          - name: wrong
            series: {loss: "0.5x3"}
            chunk: 1
            expect:
              small: {status: fail, step: 2, message: "> 1"}
    """,
    )
    out = gatekeeper("test", str(tests), "--junit", str(tmp_path / "j.xml"))
    assert out.returncode == 1, out.stderr
    assert f"FAIL {tests}:5: wrong" in out.stdout
    assert f"{tests}:9: p/small" in out.stdout
    assert "- expected: status=fail step=2 message contains '> 1'" in out.stdout
    assert "+ got:      status=pass step=3" in out.stdout
    assert "(fed in polls of 1 points)" in out.stdout
    assert "1 of 2 policy tests passed" in out.stdout
    schema = xmlschema.XMLSchema(str(REPO / "tests" / "data" / "junit-4.xsd"))
    schema.validate(str(tmp_path / "j.xml"))
    root = ET.parse(tmp_path / "j.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["right"].find("failure") is None
    assert "status=pass" in cases["wrong"].find("failure").text


def test_passing_tests_exit_0(tmp_path):
    write_policy(tmp_path / "p.yaml", POLICY)
    write_policy(
        tmp_path / "p.test.yaml",
        """
        tests:
          - name: ok
            series: {loss: "0.5 0.7"}
            expect: {small: pass}
    """,
    )
    out = gatekeeper("test", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: 1 of 1 policy tests passed" in out.stdout


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('    series: {loss: "1 two"}\n    expect: {small: pass}\n', "tests[0].series.loss.values"),
        ('    series: {loss: "1"}\n    expect: {nope: pass}\n', "names no rule"),
        ('    series: {loss: "1"}\n    expect: {small: passed}\n', "tests[0].expect.small.status"),
        ('    series: {loss: "1"}\n', "a test that asserts nothing"),
        (
            '    series: {loss: "1"}\n    history: full\n    expect: {small: pass}\n',
            "tests[0].history",
        ),
        (
            '    series: {loss: "1"}\n    references: {r: {series: {loss: "1 x"}}}\n'
            "    expect: {small: pass}\n",
            "tests[0].references.r.series.loss.values",
        ),
    ],
)
def test_bad_test_files_exit_2_naming_file_line_and_field(tmp_path, body, message):
    write_policy(tmp_path / "p.yaml", POLICY)
    tests = tmp_path / "p.test.yaml"
    tests.write_text("tests:\n  - name: t\n" + body)
    out = gatekeeper("test", str(tests))
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and f"{tests}:" in out.stderr
    with pytest.raises(PolicyError):
        run_file(str(tests))


def test_a_clock_drives_stale_rules_while_live(tmp_path):
    write_policy(
        tmp_path / "s.yaml",
        """
        version: 1
        name: s
        rules:
          - id: hung
            metric: loss
            check: {stale: {max_seconds: 60}}
    """,
    )
    tests = write_policy(
        tmp_path / "s.test.yaml",
        """
        tests:
          - name: quiet for 90 s while live fails
            series: {loss: "1 1"}
            live: true
            clock: {now: 100, arrivals: {loss: 10}}
            expect: {hung: {status: fail, message: no new point for 90.0 s}}
          - name: quiet for 30 s passes
            series: {loss: "1 1"}
            live: true
            clock: {now: 40, arrivals: {loss: 10}}
            expect: {hung: pass}
          - name: without a clock a live stale rule is skipped, never a silent pass
            series: {loss: "1 1"}
            live: true
            expect: {hung: skip}
    """,
    )
    results = run_file(str(tests))
    assert [r.problems for r in results] == [[], [], []]


def test_an_override_naming_no_rule_is_an_error_at_its_line(tmp_path):
    write_policy(tmp_path / "p.yaml", POLICY)
    tests = write_policy(
        tmp_path / "p.test.yaml",
        """
        tests:
          - name: t
            series: {loss: "1"}
            overrides: ["p/nope=off:why"]
            expect: {small: skip}
    """,
    )
    out = gatekeeper("test", str(tests))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{tests}:4: tests[0].overrides" in out.stderr and "p/nope" in out.stderr


PATTERN_POLICY = """
version: 1
name: p
rules:
  - {id: acc, metric: "eval/*/acc", check: {min: 0.5}}
"""


def test_a_pattern_rule_s_results_are_expected_by_rule_and_metric(tmp_path):
    """`acc[eval/a/acc]` names the pattern rule's result on one metric (also as
    `p/acc[...]`); one the run does not make is a failed test listing the results, and a
    rule that does not exist is exit 2 naming the line."""
    write_policy(tmp_path / "p.yaml", PATTERN_POLICY)
    tests = write_policy(tmp_path / "p.test.yaml", """
        tests:
          - name: each eval set its own result
            series: {eval/a/acc: "0.6", eval/b/acc: "0.4"}
            expect:
              "acc[eval/a/acc]": pass
              "p/acc[eval/b/acc]": {status: fail, value: 0.4}
          - name: a metric the run lacks
            series: {eval/a/acc: "0.6"}
            expect:
              "acc[eval/zzz/acc]": pass
    """)
    out = gatekeeper("test", str(tests))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "p/acc[eval/zzz/acc]: no result; results: p/acc[eval/a/acc]" in out.stdout
    assert "1 of 2 policy tests passed" in out.stdout
    tests.write_text(tests.read_text().replace("acc[eval/zzz/acc]", "nope[eval/a/acc]"))
    out = gatekeeper("test", str(tests))
    assert out.returncode == 2
    assert "p.test.yaml:10: tests[1].expect.nope[eval/a/acc]: names no rule" in out.stderr
