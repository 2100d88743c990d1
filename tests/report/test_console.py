"""The console report: the verdict line first, the `-v` table fitted to the width it is given
(the CLI's default and `-q` shapes, through a terminal and a pipe: test_console_cli.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gatekeeper.engine import evaluate
from gatekeeper.policy.loader import load_policies
from gatekeeper.report import console
from gatekeeper.sources import open_source
from tests.report.runs import failing_run


@pytest.fixture(scope="module")
def verdict(tmp_path_factory: pytest.TempPathFactory):
    run, policy = failing_run(tmp_path_factory.mktemp("console"), steps=2000)
    return evaluate(load_policies([str(policy)]), open_source(str(run)).read())


@pytest.mark.parametrize("columns", [70, 100, 160, 220])
def test_table_fits_the_width_and_the_verdict_comes_first(verdict, columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = io.StringIO()
    console.render(verdict, out, verbose=True)
    lines = out.getvalue().splitlines()
    head = "gate FAILED: grpo-<b>bold</b> (run state: finished): 3 pass, 3 fail, 1 error"
    assert lines[0].startswith(head)
    # then one unwrapped, greppable line per finding, then the table within the width
    assert lines[1].startswith("  FAIL demo/kl-step0: |x| = 0.3 > 1e-09 at train/step 0")
    table = [ln for ln in lines if ln[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= columns
    # one row per rule (folded, never cut), failing rules first
    statuses = [ln.split("│")[1].strip() for ln in lines if ln.startswith("│")]
    assert [s for s in statuses if s] == ["FAIL"] * 3 + ["ERROR"] + ["PASS"] * 3
    # a rule id breaks after its "/" when it must, never inside a word
    rules = "".join(ln.split("│")[2].strip() for ln in lines if ln.startswith("│"))
    for r in verdict.results:
        assert f"{r.policy}/{r.rule}" in rules


def test_without_verbose_no_table_but_a_line_per_finding(verdict, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    console.render(verdict, out)
    lines = out.getvalue().splitlines()
    assert not [ln for ln in lines if ln[:1] in "┏┃┡│└"], lines
    assert [ln.split()[0] for ln in lines[1:-1]] == ["FAIL"] * 3 + ["ERROR"]
    assert lines[-1] == f"  -v: the table of all {len(verdict.results)} rules"


def test_counts_read_as_english(tmp_path: Path):
    from gatekeeper.checks import registry

    trend = registry()["trend"].parse({"window": 3, "max_slope": 1.0})
    state = trend.feed(trend.start(), __import__("numpy").arange(3), __import__("numpy").zeros(3))
    message = trend.outcome(state, final=True, ctx=None).message
    assert message.startswith("1 window within")
