"""JUnit XML: one testcase per rule result (classname = policy), for GitLab, Jenkins,
Buildkite. `failure` for fail, `error` for error, `skipped` for skip/pending; warnings pass
with their message in system-out. Only elements and attributes of the common JUnit schema.

A final verdict that judged nothing (every gating rule skipped) adds the testcase
`gatekeeper/nothing-judged` with an `error`: a suite of skipped tests alone shows green
in GitLab, Jenkins and Buildkite (none of them reads a property), an error is listed and
counted; relaxed with a reason, that testcase is `skipped` with the reason.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gatekeeper.report.files import write_atomic
from gatekeeper.report.text import result_line, stopped_text, summary_line
from gatekeeper.verdict import GateStatus, RuleResult, Status, Verdict

# XML 1.0 cannot carry these at all (not even escaped): written as \xNN / \uNNNN text.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def _detail(r: RuleResult) -> str:
    lines = [
        f"metric:   {r.metric}",
        f"step:     {r.step_key or 'step'} {r.step if r.step is not None else '-'}",
        f"observed: {r.value if r.value is not None else '-'}",
        f"expected: {r.expected}",
        f"declared: {r.source}",
    ]
    if r.mode.value == "shadow":
        lines.append("mode:     shadow (reported, never fails the gate)")
    if r.description:
        lines.append(f"why:      {r.description}")
    return _x("\n".join(lines))


def to_xml(verdict: Verdict) -> bytes:
    root = ET.Element("testsuites", name="gatekeeper")
    suites: dict[str, ET.Element] = {}
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    per_suite: dict[str, dict[str, int]] = {}
    for r in verdict.results:
        suite = suites.get(r.policy)
        if suite is None:
            suite = suites[r.policy] = ET.SubElement(root, "testsuite", name=_x(r.policy))
            per_suite[r.policy] = dict.fromkeys(totals, 0)
        counts = per_suite[r.policy]
        case = ET.SubElement(suite, "testcase", name=_x(r.rule), classname=_x(r.policy), time="0")
        counts["tests"] += 1
        message = _x(result_line(r))
        # A shadow-mode or warn-severity failure does not fail the gate: report, don't fail CI.
        gating_kind = r.gating or r.status in (Status.SKIP, Status.PENDING)
        detail = _detail(r)
        if verdict.stopped and verdict.stopped.get("rule") == f"{r.policy}/{r.rule}":
            detail += _x(f"\nstopped:  {stopped_text(verdict.stopped)}")
        if r.status is Status.FAIL and gating_kind:
            ET.SubElement(case, "failure", message=message, type="fail").text = detail
            counts["failures"] += 1
        elif r.status is Status.ERROR and gating_kind:
            ET.SubElement(case, "error", message=message, type="error").text = detail
            counts["errors"] += 1
        elif r.status in (Status.SKIP, Status.PENDING):
            ET.SubElement(case, "skipped", message=message)
            counts["skipped"] += 1
        else:
            ET.SubElement(case, "system-out").text = f"{message}\n{_detail(r)}"
    _not_judged(verdict, suites)
    if verdict.nothing_judged:
        _nothing_judged(verdict, root, suites, per_suite, totals)
    for name, suite in suites.items():
        for key, n in per_suite[name].items():
            suite.set(key, str(n))
            totals[key] += n
    for key, n in totals.items():
        root.set(key, str(n))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _properties(suite: ET.Element) -> ET.Element:
    """The suite's one `properties` element, which comes first in a testsuite."""
    props = suite.find("properties")
    if props is None:
        props = ET.Element("properties")
        suite.insert(0, props)
    return props


def _not_judged(verdict: Verdict, suites: dict[str, ET.Element]) -> None:
    """Each suite with skips its source could not avoid (a metric a miles CI record never
    keeps) says how many and why, as a property a CI dashboard shows beside the skips;
    each suite with overridden rules, how many (each testcase's message has the reason)."""
    by_suite: dict[str, dict[str, int]] = {}
    overridden: dict[str, int] = {}
    for r in verdict.results:
        if r.status is Status.SKIP and r.not_judged:
            reasons = by_suite.setdefault(r.policy, {})
            reasons[r.not_judged] = reasons.get(r.not_judged, 0) + 1
        if r.override is not None:
            overridden[r.policy] = overridden.get(r.policy, 0) + 1
    for policy, reasons in by_suite.items():
        props = _properties(suites[policy])
        for reason, n in reasons.items():
            text = _x(f"{n} rule{'s' if n != 1 else ''} not judged: {reason}")
            ET.SubElement(props, "property", name="gatekeeper.not_judged", value=text)
    for policy, n in overridden.items():
        ET.SubElement(_properties(suites[policy]), "property", name="gatekeeper.overridden",
                      value=str(n))


NOTHING_SUITE = "gatekeeper"  # the built-in results' policy name (run-state too)
NOTHING_CASE = "nothing-judged"


def _nothing_judged(
    verdict: Verdict,
    root: ET.Element,
    suites: dict[str, ET.Element],
    per_suite: dict[str, dict[str, int]],
    totals: dict[str, int],
) -> None:
    """The testcase that says no gating rule was judged: `error`, or `skipped` when
    allowed; the suite also carries the gate status as a property."""
    suite = suites.get(NOTHING_SUITE)
    if suite is None:
        suite = suites[NOTHING_SUITE] = ET.SubElement(root, "testsuite", name=NOTHING_SUITE)
        per_suite[NOTHING_SUITE] = dict.fromkeys(totals, 0)
    ET.SubElement(_properties(suite), "property", name="gatekeeper.status",
                  value=verdict.status.value)
    case = ET.SubElement(
        suite, "testcase", name=NOTHING_CASE, classname=NOTHING_SUITE, time="0"
    )
    counts = per_suite[NOTHING_SUITE]
    counts["tests"] += 1
    line = _x(summary_line(verdict))
    if verdict.status is GateStatus.NOTHING:
        ET.SubElement(case, "error", message=line, type="nothing_judged").text = _x(
            "No gating (enforce-mode, fail-severity) rule was judged: the gate can neither "
            "pass nor fail. Exit code 5. Relax with --allow-nothing-judged REASON or a "
            "policy's allow_nothing_judged: REASON."
        )
        counts["errors"] += 1
    else:
        ET.SubElement(case, "skipped", message=line)
        counts["skipped"] += 1


def write(verdict: Verdict, path: str) -> None:
    write_atomic(path, to_xml(verdict) + b"\n")
