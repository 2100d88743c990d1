"""The console report: a table of rule results and a one-line verdict."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gatekeeper.errors import one_line
from gatekeeper.report.color import console_options
from gatekeeper.report.text import ordered, step_text, summary_line, value_text
from gatekeeper.verdict import GateStatus, RuleResult, Status, Verdict

STYLES = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.ERROR: "bold magenta",
    Status.SKIP: "dim",
    Status.PENDING: "cyan",
}


def make_console(stream: TextIO | None = None, color: str = "auto") -> Console:
    stream = stream or sys.stdout
    # A terminal's own width; elsewhere (CI logs) $COLUMNS or 120, which a log viewer shows
    # without wrapping. The table is fitted to that width, never wider.
    width = shutil.get_terminal_size((120, 24)).columns if stream.isatty() else _columns()
    return Console(
        file=stream, width=width, highlight=False, soft_wrap=False,
        **console_options(color, stream),
    )


def _columns() -> int:
    try:
        return max(60, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 120


def render(
    verdict: Verdict, stream: TextIO | None = None, *, show_skipped: bool = True,
    color: str = "auto",
) -> None:
    """The one-line verdict first (what a reader needs), then each finding on one unwrapped
    line (greppable in a CI log), then the table fitted to the width; `color`: see
    report/color.py."""
    console = make_console(stream, color)
    style = {
        GateStatus.PASS: "bold green", GateStatus.PENDING: "bold cyan",
        GateStatus.NOTHING: "bold yellow",  # not a failure, not a pass
    }.get(verdict.status, "bold red")
    console.print(Text(summary_line(verdict), style=style), soft_wrap=True)
    findings = [r for r in ordered(verdict.results) if r.status in FINDINGS]
    for r in findings[:MAX_FINDINGS]:
        line = Text(one_line(f" {r.policy}/{r.rule}: ")) + _message(r) + Text(f" ({r.source})")
        console.print(Text("  ") + _status(r) + line, soft_wrap=True)
    if len(findings) > MAX_FINDINGS:
        console.print(Text(f"  … {len(findings) - MAX_FINDINGS} more in the table"))
    rows = [r for r in ordered(verdict.results) if show_skipped or r.status is not Status.SKIP]
    if rows:
        table = _wide(rows) if console.width >= WIDE else _narrow(rows)
        console.print(table)


FINDINGS = (Status.FAIL, Status.ERROR, Status.WARN)
MAX_FINDINGS = 10
WIDE = 120  # below this, metric/step/value/bound move under the message


def _status(r: RuleResult) -> Text:
    status = Text(r.status.value.upper(), style=STYLES[r.status])
    if r.mode.value == "shadow":
        status.append(" (shadow)", style="dim")
    return status


def _message(r: RuleResult) -> Text:
    # Text(), not str: rule messages may contain "[...]", which rich reads as markup;
    # one_line: names from the run may hold control characters or lone surrogates.
    return Text(one_line(r.message + (f" [override: {r.override}]" if r.override else "")))


def _wide(rows: list[RuleResult]) -> Table:
    # Shares of the width (expand: exactly the console's), the message getting the most.
    table = Table(show_lines=False, pad_edge=False, expand=True)
    table.add_column("status", no_wrap=True, width=7)
    table.add_column("rule", overflow="fold", ratio=4)
    table.add_column("metric", overflow="fold", ratio=3)
    table.add_column("step", overflow="fold", width=14)
    table.add_column("observed", overflow="fold", width=9)
    table.add_column("bound", overflow="fold", ratio=3)
    table.add_column("message", overflow="fold", ratio=7)
    for r in rows:
        table.add_row(
            _status(r), Text(one_line(f"{r.policy}/{r.rule}")), Text(one_line(r.metric)),
            Text(one_line(step_text(r))), Text(value_text(r)), Text(one_line(r.expected)),
            _message(r),
        )
    return table


def _narrow(rows: list[RuleResult]) -> Table:
    table = Table(show_lines=False, pad_edge=False, expand=True)
    table.add_column("status", no_wrap=True, width=7)
    table.add_column("rule", overflow="fold", ratio=2)
    table.add_column("message", overflow="fold", ratio=5)
    for r in rows:
        facts = one_line(f"{r.metric} · {step_text(r)} · {value_text(r)} · {r.expected}")
        detail = Text("\n" + facts, style="dim")
        table.add_row(_status(r), Text(one_line(f"{r.policy}/{r.rule}")), _message(r) + detail)
    return table
