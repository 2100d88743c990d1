"""Reporters: JUnit that a JUnit schema accepts, GitHub's annotation and summary limits."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import xmlschema

from gatekeeper.report import github, junit
from gatekeeper.verdict import Mode, RuleResult, Severity, Status, Verdict
from tests.helpers import REPO

SCHEMA = xmlschema.XMLSchema(str(REPO / "tests" / "data" / "junit-4.xsd"))


def result(i: int, status: Status, severity=Severity.FAIL, mode=Mode.ENFORCE, **kw) -> RuleResult:
    base = dict(
        policy="pol", rule=f"r{i}", status=status, severity=severity, mode=mode, metric="train/m",
        message=f"message {i} with <xml> & 'quotes'", source=f"policies/p.yaml:{10 + i}",
        step=0, step_key="train/step", value=0.5, expected="x <= 0.1",
    )
    base.update(kw)
    return RuleResult(**base)


def verdict(results) -> Verdict:
    return Verdict(run={"name": "r"}, results=list(results))


def test_junit_is_schema_valid_and_maps_statuses():
    v = verdict([
        result(0, Status.PASS), result(1, Status.FAIL), result(2, Status.ERROR),
        result(3, Status.SKIP), result(4, Status.WARN, severity=Severity.WARN),
        result(5, Status.FAIL, mode=Mode.SHADOW), result(6, Status.PENDING),
    ])
    xml = junit.to_xml(v)
    SCHEMA.validate(xml.decode())
    root = ET.fromstring(xml)
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "7", "failures": "1", "errors": "1", "skipped": "2"
    }
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["r1"].find("failure") is not None and cases["r2"].find("error") is not None
    assert cases["r3"].find("skipped") is not None
    assert cases["r5"].find("failure") is None  # shadow mode never fails the job
    assert all(c.get("classname") == "pol" for c in cases.values())


def test_junit_schema_rejects_what_readers_reject():
    bad = (
        b'<testsuites><testsuite name="x" tests="1"><testcase name="a"><oops/></testcase>'
        b"</testsuite></testsuites>"
    )
    assert not SCHEMA.is_valid(bad.decode())


def test_annotations_stay_within_githubs_limits():
    v = verdict([result(i, Status.FAIL) for i in range(25)] + [
        result(100 + i, Status.WARN, severity=Severity.WARN) for i in range(12)
    ])
    lines = github.annotation_lines(v)
    assert sum(ln.startswith("::error ") for ln in lines) == 10
    assert sum(ln.startswith("::warning ") for ln in lines) == 10
    (note,) = [ln for ln in lines if ln.startswith("::notice")]
    assert "15 more errors and 2 more warnings" in note
    assert "file=policies/p.yaml,line=10," in lines[0]


def test_annotation_data_and_properties_are_escaped():
    r = result(0, Status.FAIL, message="100% bad\nsecond line", source="odd,dir/p:x.yaml:12")
    (line,) = github.annotation_lines(verdict([r]))
    assert "100%25 bad%0Asecond line" in line and "\n" not in line
    assert "file=odd%2Cdir/p%3Ax.yaml,line=12" in line


def test_step_summary_is_cut_below_the_limit():
    many = verdict([result(i, Status.FAIL, message="x" * 2000) for i in range(1000)])
    text = github.step_summary(many)
    assert len(text.encode()) < github.SUMMARY_LIMIT
    assert "more rows cut" in text
    small = github.step_summary(verdict([result(1, Status.FAIL)]))
    assert "| `pol/r1` | fail |" in small and "cut" not in small


def test_console_prints_brackets_in_messages_verbatim():
    import io

    from gatekeeper.report import console

    out = io.StringIO()
    console.render(verdict([result(0, Status.FAIL, message="window [bold] of [20 points]")]), out)
    assert "[bold]" in out.getvalue() and "[20 points]" in out.getvalue()
