"""The console report: a table of rule results and a one-line verdict."""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gatekeeper.errors import one_line
from gatekeeper.report.color import console_options
from gatekeeper.report.text import (
    detail_lines,
    listed,
    message_text,
    ordered,
    step_text,
    value_text,
    verdict_line,
)
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
    color: str = "auto", verbose: bool = False,
) -> None:
    """pytest's shape: the verdict line (outcome, run, counts), then one unwrapped line
    per failed, errored or warning rule and per overridden rule (greppable in a CI log),
    then the details (why nothing was judged, what the source cannot carry, when a live
    run was stopped). `verbose`: then the table of every rule, fitted to the width;
    `show_skipped` False leaves skips out of it, but never a rule an override switched
    off. `color`: see report/color.py."""
    console = make_console(stream, color)
    style = {
        GateStatus.PASS: "bold green", GateStatus.PENDING: "bold cyan",
        GateStatus.NOTHING: "bold yellow",  # not a failure, not a pass
    }.get(verdict.status, "bold red")
    console.print(Text(verdict_line(verdict), style=style), soft_wrap=True)
    for r in listed(verdict):
        line = Text(one_line(f" {r.policy}/{r.rule}: {message_text(r)} ({r.source})"))
        console.print(Text("  ") + _status(r) + line, soft_wrap=True)
    for detail in detail_lines(verdict):
        console.print(Text(f"  {detail}"), soft_wrap=True)
    rows = [r for r in ordered(verdict.results)
            if show_skipped or r.status is not Status.SKIP or r.override is not None]
    if verbose:
        if rows:
            console.print((_wide if console.width >= WIDE else _narrow)(rows, console.width))
    elif len(verdict.results) > len(listed(verdict)):
        n = len(verdict.results)
        console.print(Text(f"  -v: the table of all {n} rule{'s' if n != 1 else ''}",
                           style="dim"), soft_wrap=True)


WIDE = 150  # below this, metric/step/value/bound move under the message


def _status(r: RuleResult) -> Text:
    status = Text(r.status.value.upper(), style=STYLES[r.status])
    if r.mode.value == "shadow":
        status.append(" (shadow)", style="dim")
    return status


def _message(r: RuleResult) -> Text:
    # Text(), not str: rule messages may contain "[...]", which rich reads as markup;
    # one_line: names from the run may hold control characters or lone surrogates.
    return Text(one_line(message_text(r)))


def _wide(rows: list[RuleResult], width: int) -> Table:
    # Shares of the width (expand: exactly the console's), the message getting the most;
    # rule and metric names break only after a "/", never inside a word.
    rule_w, rules = _names([f"{r.policy}/{r.rule}" for r in rows], width // 5)
    metric_w, metrics = _names([r.metric for r in rows], width // 8, fold=True)
    table = Table(show_lines=False, pad_edge=False, expand=True)
    table.add_column("status", no_wrap=True, width=7)
    table.add_column("rule", overflow="fold", width=rule_w)
    table.add_column("metric", overflow="fold", width=metric_w)
    table.add_column("step", overflow="fold", width=14)
    table.add_column("observed", overflow="fold", width=9)
    table.add_column("bound", overflow="fold", ratio=3)
    table.add_column("message", overflow="fold", ratio=7)
    for r, rule, metric in zip(rows, rules, metrics, strict=True):
        table.add_row(
            _status(r), rule, metric, Text(one_line(step_text(r))), Text(value_text(r)),
            Text(one_line(r.expected)), _message(r),
        )
    return table


def _narrow(rows: list[RuleResult], width: int) -> Table:
    rule_w, rules = _names([f"{r.policy}/{r.rule}" for r in rows], width * 2 // 7)
    table = Table(show_lines=False, pad_edge=False, expand=True)
    table.add_column("status", no_wrap=True, width=7)
    table.add_column("rule", overflow="fold", width=rule_w)
    table.add_column("message", overflow="fold", ratio=1)
    for r, rule in zip(rows, rules, strict=True):
        facts = one_line(f"{r.metric} · {step_text(r)} · {value_text(r)} · {r.expected}")
        detail = Text("\n" + facts, style="dim")
        table.add_row(_status(r), rule, _message(r) + detail)
    return table


def _names(names: list[str], budget: int, *, fold: bool = False) -> tuple[int, list[Text]]:
    """A column width for `names` and each name laid out in it: a name longer than the
    width breaks after a "/" (`miles-ci-consistency/` over `ppo-kl-rollout-start`), a part
    still too long after a "-", so an id is never cut inside a word. The width is the
    longest name when it fits `budget`, else `budget`, never less than the longest word
    (`fold`: a word wider than `budget` folds instead, for names that are not ids)."""
    shown = [one_line(n) for n in names]
    longest = max((len(n) for n in shown), default=1)
    widest = max((len(w) for n in shown for w in re.findall(r"[^/-]*[/-]|[^/-]+", n)),
                 default=1)
    width = max(1, min(longest, budget if fold else max(widest, budget)))
    return width, [Text("\n".join(_pack(n, width))) for n in shown]


def _pack(name: str, width: int) -> list[str]:
    lines = [""]
    for part in re.findall(r"[^/]*/|[^/]+", name) or [""]:
        pieces = [part] if len(part) <= width else re.findall(r"[^-]*-|[^-]+", part)
        for piece in pieces:
            if lines[-1] and len(lines[-1]) + len(piece) > width:
                lines.append("")
            lines[-1] += piece
    return lines
