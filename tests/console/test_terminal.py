"""Issue 29's console points that tests/report/test_console_cli.py does not drive, through
the real CLI on a pseudo-terminal and in a pipe, at 80 and 200 columns, with and without
NO_COLOR: `gatekeeper checks` and `checks KIND` fit the terminal without cutting a word;
`-q` on a terminal keeps each failure whole on its line; `reach` on a run that ended
before its deadline says so, where one that got there and fell short fails naming its
best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.console.terminal import ANSI, in_a_pipe, on_a_terminal
from tests.helpers import write_policy, write_rows

BROKEN = ("check", "examples/runs/broken-kl", "-p", "policies", "--no-config")


@pytest.mark.parametrize(("columns", "no_color"), [(80, False), (200, True)])
def test_checks_and_a_kind_page_fit_the_terminal_and_read_the_same_in_a_pipe(
    columns, no_color
):
    for args, width in ((("checks",), columns), (("checks", "reach"), min(columns, 100))):
        code, piped = in_a_pipe(*args, columns=columns)
        assert code == 0 and not ANSI.search(piped), piped
        lines = piped.splitlines()
        assert max(map(len, lines)) <= width, [ln for ln in lines if len(ln) > width]
        code, shown = on_a_terminal(*args, columns=columns, no_color=no_color)
        assert code == 0 and not (no_color and ANSI.search(shown)), shown
        assert ANSI.sub("", shown) == piped  # a CI log reads what a terminal shows
    # the page's prose is the doc's words, refilled: none cut, none lost
    from gatekeeper.checks.reach import __doc__ as doc

    assert " ".join(str(doc).split()) in " ".join(piped.split())
    if columns == 80:  # a doc line is ~88 wide: refilled, not left to the terminal to cut
        assert "rolling\nmean" not in piped and len(lines[2]) <= 80


@pytest.mark.parametrize("columns", [80, 200])
def test_quiet_on_a_terminal_keeps_each_failure_whole_and_coloured(columns):
    """-q colours as the console report does (it was plain whatever --color said)."""
    code, shown = on_a_terminal(*BROKEN, "-q", columns=columns)
    lines = ANSI.sub("", shown).splitlines()
    assert code == 1 and shown.startswith("\x1b[1;31mgate FAILED"), shown
    assert shown.count("\x1b[1;31mFAIL\x1b[0m ") == 2, shown
    code, plain = on_a_terminal(*BROKEN, "-q", "--color", "never", columns=columns)
    assert ANSI.sub("", shown) == plain
    assert lines[0].startswith("gate FAILED: qwen3-4b-grpo-e2e-broken ")
    assert [ln.split()[0] for ln in lines[1:]] == ["FAIL", "FAIL"]  # no hint, no table
    assert all(ln.endswith(")") and len(ln) > 80 for ln in lines[1:])  # never wrapped


REACH = """
version: 1
name: first
rules:
  - {id: loss-finite, metric: loss, check: {finite: true}}
  - {id: reward-learns, metric: reward, check: {reach: {value: 0.7, by_step: 80, window: 3}}}
"""


def _run(path: Path, last_step: int) -> Path:
    return write_rows(path, [{"step": s, "loss": 2.0 - s / 100, "reward": 0.2 + s / 400}
                             for s in range(last_step + 1)])


@pytest.mark.parametrize(("columns", "no_color"), [(80, False), (200, True)])
def test_reach_on_a_run_that_ended_before_its_deadline_says_so(tmp_path, columns, no_color):
    """The run ends at step 44, before `by_step: 80`: a SKIP saying so (was: "never
    reached 0.7 by step 80 (best … at step 44)", a failure of a claim about step 80).
    A run that got to step 90 without 0.7 fails, naming its best mean and step."""
    policy = write_policy(tmp_path / "p.yaml", REACH)
    short = _run(tmp_path / "short.jsonl", 44)
    report = tmp_path / "v.json"
    code, shown = on_a_terminal("check", str(short), "-p", str(policy), "-v", "--json",
                                str(report), columns=columns, no_color=no_color)
    text = " ".join(ANSI.sub("", shown).replace("│", " ").split())  # table cells joined
    assert code == 0 and text.startswith("gate PASSED: short: 1 pass, 1 skip"), shown
    said = "the run ended at step 44, before step 80: not yet 0.7 is no failure"
    assert said in text, shown
    (skip,) = [r for r in json.loads(report.read_text())["results"]
               if r["rule"] == "reward-learns"]
    assert skip["status"] == "skip" and skip["message"].startswith(said)

    long = _run(tmp_path / "long.jsonl", 90)
    code, shown = on_a_terminal("check", str(long), "-p", str(policy), columns=columns,
                                no_color=no_color)
    fail = ANSI.sub("", shown).splitlines()[1]
    assert code == 1 and fail.startswith("  FAIL first/reward-learns: "), shown
    assert "never reached 0.7 by step 80 (best 0.3975 at step 80)" in fail, fail
