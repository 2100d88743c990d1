"""GitHub Actions: workflow-command annotations at the policy file:line, and a Markdown
table appended to $GITHUB_STEP_SUMMARY.

GitHub shows at most 10 error and 10 warning annotations per step; past that the rest are
summarized in one notice line. The step summary file is capped at 1 MiB per step.
"""

from __future__ import annotations

import os
import re
from typing import TextIO

from gatekeeper.errors import one_line
from gatekeeper.model import Run
from gatekeeper.report.files import append_text
from gatekeeper.report.text import (
    detail_lines,
    listed,
    message_text,
    ordered,
    result_line,
    step_text,
    summary_line,
    value_text,
    verdict_line,
)
from gatekeeper.verdict import GateStatus, RuleResult, Status, Verdict

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
    out: list[str] = _nothing_judged(verdict)
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


def _nothing_judged(verdict: Verdict) -> list[str]:
    """A verdict that judged nothing fails the step (exit 5) with no rule to annotate:
    one `::error` saying so and why; relaxed, a `::notice` with the reason."""
    if not verdict.nothing_judged:
        return []
    level = "error" if verdict.status is GateStatus.NOTHING else "notice"
    title = _escape_prop("gatekeeper: nothing judged")
    return [f"::{level} title={title}::{_escape_data(summary_line(verdict))}"]


def _cell(text: str) -> str:
    """Input text as inert Markdown in a table cell: GitHub renders some raw HTML (`<img>`),
    so markup characters become entities; `|` would end the cell."""
    text = one_line(text)
    text = re.sub(r"([\\`*_\[\]])", r"\\\1", text)  # emphasis, links, code
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _code(text: str) -> str:
    """Input text as a code span: fenced by more backticks than it contains (entities are
    not decoded inside code, so only `|` and newlines need care)."""
    text = one_line(text).replace("|", "\\|").replace("\n", " ").replace("\r", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


TABLE_HEAD = (
    "| rule | status | metric | step | observed | bound | message |\n"
    "|---|---|---|---|---|---|---|\n"
)


def step_summary(verdict: Verdict, budget: int = SUMMARY_LIMIT) -> str:
    """The verdict line as the heading, its details below, a table of what needs a look
    (failed, errored, warning, pending and overridden rules), and the passes and skips
    folded into a `<details>` table; rows are cut (with a note) to stay within `budget`
    bytes."""
    icon = {"pass": "✅", "fail": "❌", "error": "❌", "pending": "⏳", "nothing_judged": "⚠️"}[
        verdict.status.value
    ]
    text = f"### {icon} {_cell(verdict_line(verdict))}\n\n"
    text += "".join(f"- {_cell(line)}\n" for line in detail_lines(verdict))
    shown = listed(verdict) + [r for r in ordered(verdict.results) if r.status is Status.PENDING
                               and r.override is None]
    picked = {id(r) for r in shown}
    folded = [r for r in ordered(verdict.results) if id(r) not in picked]
    rows = [_row(r) for r in shown] + [_row(r) for r in folded]
    tables = [(0, len(shown))] if shown else []
    if folded:
        tables.append((len(shown), len(rows)))
    size = len(text.encode()) + 400
    for start, stop in tables:
        if start:  # the passes and skips
            text += f"\n<details><summary>{_folded_title(folded)}</summary>\n\n"
        text += "\n" + TABLE_HEAD if not start else TABLE_HEAD
        for i in range(start, stop):
            n = len(rows[i].encode()) + 1
            if size + n > budget:
                text += (f"\n_…{len(rows) - i} more rows cut to stay within GitHub's 1 MiB "
                         "step summary limit._\n")
                return text + ("\n</details>\n\n" if start else "\n")
            text += rows[i] + "\n"
            size += n
        text += "\n</details>\n" if start else ""
    return text + "\n"


def _folded_title(results: list[RuleResult]) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status.value] = counts.get(r.status.value, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def _row(r: RuleResult) -> str:
    status = r.status.value + (" (shadow)" if r.mode.value == "shadow" else "")
    status += " (overridden)" if r.override is not None else ""
    return (
        f"| {_code(f'{r.policy}/{r.rule}')} | {status} | {_code(r.metric)} | "
        f"{_cell(step_text(r))} | {_cell(value_text(r))} | {_cell(r.expected)} | "
        f"{_cell(message_text(r))} ({_cell(r.source)}) |"
    )


def emit(verdict: Verdict, stream: TextIO, summary_path: str | None) -> None:
    """The step summary (a file: written first, whatever happens to the stream), then
    the annotations on `stream`."""
    if summary_path:
        write_summary(verdict, summary_path)
    for line in annotation_lines(verdict):
        print(line, file=stream)


def write_summary(verdict: Verdict, summary_path: str) -> None:
    try:
        existing = os.path.getsize(summary_path)
    except OSError:  # not there yet; one that cannot be written says so below
        existing = 0
    budget = max(0, SUMMARY_LIMIT - existing)
    if budget > 1024:
        what = "the step summary ($GITHUB_STEP_SUMMARY)"
        append_text(summary_path, step_summary(verdict, budget), what)


MAX_CHARTS = 20


def chart_section(verdict: Verdict, run: Run, budget: int) -> str:
    """Mermaid charts of the failing rules' series against their bounds, within `budget`
    bytes (charts that would not fit are left out, with a note)."""
    # imported here: the annotations every `check` writes need none of the plotting
    from gatekeeper.report.html_series import figure, series_for
    from gatekeeper.report.mermaid import xychart

    failing = [r for r in ordered(verdict.results) if r.status in (Status.FAIL, Status.ERROR)]
    blocks = []
    for r in failing[:MAX_CHARTS]:
        fig = figure(r, series_for(r, run.series), points=400)
        block = xychart(fig, f"{r.policy}/{r.rule} {r.status.value} at step {r.step}")
        if block:
            where = f" at {_cell(step_text(r))}" if r.step is not None else ""
            blocks.append(
                f"**{_code(f'{r.policy}/{r.rule}')}** {r.status.value}{where}: "
                f"{_code(r.metric)} against {_cell(r.expected)}\n\n{block}\n"
            )
    if not blocks:
        return ""
    text = "#### Failing rules over their steps\n\n"
    for i, block in enumerate(blocks):
        if len((text + block).encode()) + 200 > budget:
            return text + f"_{len(blocks) - i} more charts left out (1 MiB step summary limit)._\n"
        text += block + "\n"
    if len(failing) > MAX_CHARTS:
        text += f"_{len(failing) - MAX_CHARTS} more failing rules: see the HTML report._\n"
    return text


def append_charts(verdict: Verdict, run: Run, summary_path: str) -> None:
    """Charts under the table `emit` wrote, in what is left of the 1 MiB."""
    existing = os.path.getsize(summary_path) if os.path.exists(summary_path) else 0
    budget = SUMMARY_LIMIT - existing
    text = chart_section(verdict, run, budget) if budget > 1024 else ""
    if text:
        with open(summary_path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
