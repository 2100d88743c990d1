"""JUnit XML: one testcase per rule result (classname = policy), for GitLab, Jenkins,
Buildkite. `failure` for fail, `error` for error, `skipped` for skip/pending; warnings pass
with their message in system-out. Only elements and attributes of the common JUnit schema.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gatekeeper.report.files import write_atomic
from gatekeeper.report.text import result_line, stopped_text
from gatekeeper.verdict import RuleResult, Status, Verdict

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
    if r.override:
        lines.append(f"override: {r.override}")
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
    for name, suite in suites.items():
        for key, n in per_suite[name].items():
            suite.set(key, str(n))
            totals[key] += n
    for key, n in totals.items():
        root.set(key, str(n))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write(verdict: Verdict, path: str) -> None:
    write_atomic(path, to_xml(verdict) + b"\n")
