"""The console report: a table of rule results and a one-line verdict."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gatekeeper.errors import one_line
from gatekeeper.report.text import step_text, summary_line, value_text
from gatekeeper.verdict import Status, Verdict

STYLES = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.ERROR: "bold magenta",
    Status.SKIP: "dim",
    Status.PENDING: "cyan",
}


def make_console(stream: TextIO | None = None) -> Console:
    stream = stream or sys.stdout
    tty = stream.isatty()
    # CI logs are not terminals: keep the table wide enough to read without wrapping.
    return Console(file=stream, width=None if tty else 160, highlight=False, soft_wrap=False)


def render(verdict: Verdict, stream: TextIO | None = None, *, show_skipped: bool = True) -> None:
    console = make_console(stream)
    table = Table(show_lines=False, pad_edge=False, expand=False)
    for col in ("rule", "status", "metric", "step", "observed", "bound", "message"):
        table.add_column(col, overflow="fold")
    for r in verdict.results:
        if r.status is Status.SKIP and not show_skipped:
            continue
        status = Text(r.status.value.upper(), style=STYLES[r.status])
        if r.mode.value == "shadow":
            status.append(" (shadow)", style="dim")
        message = r.message + (f" [override: {r.override}]" if r.override else "")
        # Text(), not str: rule messages may contain "[...]", which rich reads as markup;
        # one_line: names from the run may hold control characters or lone surrogates.
        table.add_row(
            Text(one_line(f"{r.policy}/{r.rule}")),
            status,
            Text(one_line(r.metric)),
            Text(one_line(step_text(r))),
            Text(value_text(r)),
            Text(one_line(r.expected)),
            Text(one_line(message)),
        )
    console.print(table)
    style = "bold green" if verdict.passed else "bold red"
    console.print(Text(summary_line(verdict), style=style))
