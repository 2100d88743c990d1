"""Reports of a policy test run: a text summary with diffs, and JUnit XML (one testcase
per test, classname = test file) so a policy repository gates its own CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TextIO

from gatekeeper.report.files import write_atomic
from gatekeeper.toolkit.policytest import CaseResult


def render(results: list[CaseResult], out: TextIO) -> None:
    for r in results:
        if r.passed:
            continue
        out.write(f"FAIL {r.where}: {r.name}\n")
        for problem in r.problems:
            out.write(f"  {problem}\n")
    failed = sum(not r.passed for r in results)
    files = len({r.file for r in results})
    verdict = "FAILED" if failed else "ok"
    passed = len(results) - failed
    out.write(f"{verdict}: {passed} of {len(results)} policy tests passed in {files} file(s)\n")


def to_junit(results: list[CaseResult]) -> bytes:
    root = ET.Element("testsuites", name="gatekeeper test")
    by_file: dict[str, list[CaseResult]] = {}
    for r in results:
        by_file.setdefault(r.file, []).append(r)
    for file, cases in by_file.items():
        failures = sum(not c.passed for c in cases)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file,
            tests=str(len(cases)),
            failures=str(failures),
            errors="0",
            skipped="0",
        )
        for c in cases:
            tc = ET.SubElement(suite, "testcase", classname=file, name=c.name)
            if not c.passed:
                node = ET.SubElement(
                    tc, "failure", message=f"{c.where}: {len(c.problems)} mismatch(es)"
                )
                node.text = "\n".join(c.problems)
    root.set("tests", str(len(results)))
    root.set("failures", str(sum(not r.passed for r in results)))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def write_junit(results: list[CaseResult], path: str) -> None:
    write_atomic(path, to_junit(results))
