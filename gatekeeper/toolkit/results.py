"""Reports of a policy test run: a text summary with diffs (`-v`: one line per case), the
same as JSON or GitHub annotations, and JUnit XML (one testcase per test, classname =
test file) so a policy repository gates its own CI."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TextIO

from gatekeeper.report.files import write_atomic
from gatekeeper.toolkit.output import Item, split_source, write_github, write_json
from gatekeeper.toolkit.policytest import CaseResult


def summary(results: list[CaseResult], deselected: int = 0) -> str:
    failed = sum(not r.passed for r in results)
    files = len({r.file for r in results})
    verdict = "FAILED" if failed else "ok"
    passed = len(results) - failed
    left = f", {deselected} deselected by -k" if deselected else ""
    return f"{verdict}: {passed} of {len(results)} policy tests passed in {files} file(s){left}"


def render(
    results: list[CaseResult], out: TextIO, verbose: bool = False, deselected: int = 0
) -> None:
    for r in results:
        if r.passed:
            if verbose:
                out.write(f"PASS {r.where}: {r.name}\n")
            continue
        out.write(f"FAIL {r.where}: {r.name}\n")
        for problem in r.problems:
            out.write(f"  {problem}\n")
    out.write(summary(results, deselected) + "\n")


def _items(results: list[CaseResult], every: bool) -> list[Item]:
    return [
        Item(
            "notice" if r.passed else "error",
            f"gatekeeper test: {r.name}",
            "passed" if r.passed else "\n".join(r.problems),
            *split_source(r.where),
        )
        for r in results
        if every or not r.passed
    ]


def render_as(
    fmt: str, results: list[CaseResult], out: TextIO, verbose: bool, deselected: int
) -> None:
    """`--output-format`: text as above; github annotates each failing case (each case
    with -v) at its line; json lists every case with its problems."""
    if fmt == "text":
        render(results, out, verbose, deselected)
    elif fmt == "github":
        write_github(_items(results, verbose), summary(results, deselected), out)
    else:
        failed = sum(not r.passed for r in results)
        counts = {"ok": not failed, "passed": len(results) - failed, "failed": failed}
        doc = {"command": "test", **counts, "deselected": deselected}
        write_json(_items(results, True), doc, out)


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
