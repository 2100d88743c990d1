"""GitHub Actions: workflow-command annotations at the policy file:line, and a Markdown
table appended to $GITHUB_STEP_SUMMARY.

GitHub shows at most 10 error and 10 warning annotations per step; past that the rest are
summarized in one notice line. The step summary file is capped at 1 MiB per step.
"""

from __future__ import annotations

import os
from typing import TextIO

from gatekeeper.errors import one_line
from gatekeeper.report.text import result_line, step_text, summary_line, value_text
from gatekeeper.verdict import RuleResult, Status, Verdict

MAX_PER_LEVEL = 10
SUMMARY_LIMIT = 1024 * 1024


def _escape_data(text: str) -> str:
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _level(r: RuleResult) -> str | None:
    if r.gating:
        return "error"
    if r.status in (Status.WARN, Status.FAIL, Status.ERROR):
        return "warning"  # warn severity, or a shadow-mode failure
    return None


def annotation_lines(verdict: Verdict) -> list[str]:
    """The workflow command lines, within GitHub's per-step annotation limits."""
    out: list[str] = []
    left_over: dict[str, int] = {"error": 0, "warning": 0}
    used: dict[str, int] = {"error": 0, "warning": 0}
    for r in verdict.results:
        level = _level(r)
        if level is None:
            continue
        if used[level] >= MAX_PER_LEVEL:
            left_over[level] += 1
            continue
        used[level] += 1
        props = [f"title={_escape_prop(f'gatekeeper {r.policy}/{r.rule}: {r.status.value}')}"]
        if r.line is not None:
            props = [f"file={_escape_prop(r.file)}", f"line={r.line}", *props]
        out.append(f"::{level} {','.join(props)}::{_escape_data(result_line(r))}")
    if any(left_over.values()):
        parts = [f"{n} more {k}{'s' if n != 1 else ''}" for k, n in left_over.items() if n]
        out.append(
            f"::notice title=gatekeeper::{' and '.join(parts)} not annotated "
            "(GitHub shows 10 per level); see the step summary"
        )
    return out


def _cell(text: str) -> str:
    return one_line(text).replace("|", "\\|")


def step_summary(verdict: Verdict, budget: int = SUMMARY_LIMIT) -> str:
    """A Markdown table of the results, cut (with a note) to stay within `budget` bytes."""
    icon = {"pass": "✅", "fail": "❌", "error": "❌", "pending": "⏳"}[verdict.status.value]
    head = [
        f"### {icon} {_cell(summary_line(verdict))}",
        "",
        "| rule | status | metric | step | observed | bound | message |",
        "|---|---|---|---|---|---|---|",
    ]
    order = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.PENDING: 3, Status.PASS: 4, Status.SKIP: 5}
    rows = []
    for r in sorted(verdict.results, key=lambda r: (not r.gating, order[r.status])):
        status = r.status.value + (" (shadow)" if r.mode.value == "shadow" else "")
        message = r.message + (f" — override: {r.override}" if r.override else "")
        rows.append(
            f"| `{_cell(r.policy)}/{_cell(r.rule)}` | {status} | `{_cell(r.metric)}` | "
            f"{_cell(step_text(r))} | {_cell(value_text(r))} | {_cell(r.expected)} | "
            f"{_cell(message)} ({_cell(r.source)}) |"
        )
    text = "\n".join(head) + "\n"
    size = len(text.encode())
    reserve = 200
    for i, row in enumerate(rows):
        n = len(row.encode()) + 1
        if size + n + reserve > budget:
            text += f"\n_…{len(rows) - i} more rows cut to stay within GitHub's 1 MiB step summary limit._\n"
            break
        text += row + "\n"
        size += n
    return text + "\n"


def emit(verdict: Verdict, stream: TextIO, summary_path: str | None) -> None:
    for line in annotation_lines(verdict):
        print(line, file=stream)
    if summary_path:
        existing = os.path.getsize(summary_path) if os.path.exists(summary_path) else 0
        budget = max(0, SUMMARY_LIMIT - existing)
        if budget > 1024:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write(step_summary(verdict, budget))
