"""`gatekeeper check`'s console output as a user sees it, driven as a child process through
a pipe and through a terminal (a pty), with and without NO_COLOR, at 80 and 200 columns:
pytest's shape (the verdict line, a line per finding, the details, no table) by default,
the table with `-v`, the failures kept by `-q`, and overrides shown wherever the verdict is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.console.terminal import on_a_terminal

ROOT = Path(__file__).resolve().parents[2]
HEALTHY, BROKEN = "examples/runs/healthy", "examples/runs/broken-kl"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OFF = "miles-ci-consistency/ppo-kl-rollout-start"
WARNED = "recipe-deepseek-v4.1-flash/logprob-gap-step0"
OVERRIDES = ("--override", f"{OFF}=off:MLA kernels differ, #123",
             "--override", f"{WARNED}=warn:known gap, #124")


def _env(columns: int, no_color: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(COLUMNS=str(columns), PYTHONPATH=str(ROOT), GITHUB_ACTIONS="false")
    if no_color:
        env["NO_COLOR"] = "1"
    return env


def _piped(
    *args: str, columns: int = 80, no_color: bool = False, config: str = "--no-config"
) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args, *([config] if config else [])], cwd=ROOT,
        env=_env(columns, no_color), capture_output=True, text=True, timeout=120,
    )
    return out.returncode, out.stdout


def _tty(*args: str, columns: int = 80, no_color: bool = False) -> tuple[int, str]:
    return on_a_terminal(*args, "--no-config", columns=columns, no_color=no_color)


MODES = [
    pytest.param(_piped, False, id="pipe"),
    pytest.param(_tty, False, id="tty"),
    pytest.param(_tty, True, id="tty-NO_COLOR"),
]


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(("run", "no_color"), MODES)
def test_a_healthy_run_prints_a_few_lines_and_a_failing_one_its_failures(
    run, no_color, columns
):
    code, out = run("check", HEALTHY, "-p", "policies", columns=columns, no_color=no_color)
    coloured = bool(ANSI.search(out))
    assert coloured == (run is _tty and not no_color), repr(out)
    lines = ANSI.sub("", out).splitlines()
    assert code == 0 and 1 <= len(lines) <= 5, out
    assert lines[0].startswith("gate PASSED: qwen3-4b-grpo-e2e (run state: finished): ")
    assert lines[-1] == "  -v: the table of all 72 rules"
    code, out = run("check", BROKEN, "-p", "policies", columns=columns, no_color=no_color)
    lines = ANSI.sub("", out).splitlines()
    assert code == 1 and lines[0].startswith("gate FAILED: qwen3-4b-grpo-e2e-broken "), out
    # each failure whole on one line (a terminal may wrap it; gatekeeper never does)
    assert [ln.split()[:2] for ln in lines[1:3]] == [["FAIL", f"{OFF}:"], ["FAIL", f"{WARNED}:"]]
    assert lines[1].endswith("(policies/miles/ci-consistency.yaml:49)"), lines[1]
    assert len(lines) == 4 and "┃" not in out


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(("run", "no_color"), MODES)
def test_verbose_adds_the_table_within_the_width_ids_never_cut_in_a_word(
    run, no_color, columns
):
    code, out = run("check", BROKEN, "-p", "policies", "-v", columns=columns,
                    no_color=no_color)
    lines = ANSI.sub("", out).splitlines()
    table = [ln for ln in lines if ln[:1] in "┏┃┡│└"]
    assert code == 1 and len(table) > 72, out
    assert max(len(ln) for ln in table) <= columns
    # every id is whole in the rule column, or broken only after a "/" (a part still too
    # long: after a "-"), never inside a word
    cells: list[list[str]] = []
    for ln in table:
        if ln.startswith("│"):
            status, rule = (c.strip() for c in ln.split("│")[1:3])
            if status:
                cells.append([])
            if rule:
                cells[-1].append(rule)
    assert len(cells) == 72
    for parts in cells:
        assert all(p.endswith(("/", "-")) for p in parts[:-1]), parts
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", "".join(parts)), parts


def test_quiet_keeps_every_failure_line_and_nothing_else():
    code, out = _piped("check", BROKEN, "-p", "policies", "-q")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3, out
    assert lines[0] == ("gate FAILED: qwen3-4b-grpo-e2e-broken (run state: finished): "
                        "23 pass, 2 fail, 47 skip")
    assert lines[1].startswith(f"  FAIL {OFF}: |x| = 0.3 >= 1e-09 at train/step 0")
    assert lines[2].startswith(f"  FAIL {WARNED}: x = 10.2 > 0.05")


def test_verbose_and_quiet_exclude_each_other():
    code, _ = _piped("check", BROKEN, "-p", "policies", "-q", "-v")
    assert code == 2


@pytest.mark.parametrize("flags", [(), ("-q",), ("-v", "--hide-skipped")])
def test_overrides_are_counted_and_each_reason_said_once(flags, tmp_path):
    junit, json_path, summary = tmp_path / "j.xml", tmp_path / "v.json", tmp_path / "s.md"
    env_summary = {"GITHUB_STEP_SUMMARY": str(summary)}
    out = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "check", BROKEN, "-p", "policies", *OVERRIDES,
         *flags, "--no-config", "--junit", str(junit), "--json", str(json_path),
         "--github", "always", "--html", str(tmp_path / "r.html")],
        cwd=ROOT, env={**_env(200, True), **env_summary}, capture_output=True, text=True,
        timeout=120,
    )
    console = [ln for ln in out.stdout.splitlines() if not ln.startswith("::")]
    assert out.returncode == 0, out.stdout + out.stderr
    assert console[0].endswith(": 23 pass, 1 warn, 48 skip (2 overridden)"), console[0]
    if flags != ("-q",):  # the short form and -v list each overridden rule, reason once
        off = [ln for ln in console if OFF in ln]
        assert off[0] == (f"  SKIP {OFF}: switched off by override: MLA kernels differ, #123 "
                          "(policies/miles/ci-consistency.yaml:49)")
        assert "[override: known gap, #124]" in next(ln for ln in console if WARNED in ln)
        for reason in ("MLA kernels differ, #123", "known gap, #124"):
            assert sum(ln.count(reason) for ln in console) == (2 if flags else 1), console
    if "--hide-skipped" in flags:  # the table keeps the switched-off rule
        rows = [[c.strip() for c in ln.split("│")[1:3]] for ln in console if ln.startswith("│")]
        skips = [i for i, (status, _) in enumerate(rows) if status == "SKIP"]
        assert len(skips) == 1, rows  # 46 other skips hidden
        assert "".join(rule for _, rule in rows[skips[0]:skips[0] + 2]).startswith(OFF)
    verdict = json.loads(json_path.read_text())
    assert verdict["counts"]["overridden"] == 2 and verdict["counts"]["warn"] == 1
    root = ET.parse(junit).getroot()
    props = {(s.get("name"), p.get("name")): p.get("value") for s in root.iter("testsuite")
             for p in s.iter("property")}
    assert props[("miles-ci-consistency", "gatekeeper.overridden")] == "1"
    assert props[("recipe-deepseek-v4.1-flash", "gatekeeper.overridden")] == "1"
    case = root.find(".//testcase[@name='ppo-kl-rollout-start']")
    assert case is not None and ET.tostring(case, encoding="unicode").count("#123") == 1
    md = summary.read_text()
    assert md.startswith("### ✅ gate PASSED") and "(2 overridden)" in md.splitlines()[0]
    needs_look, folded = md.split("<details>", 1)
    assert f"`{OFF}` | skip (overridden)" in needs_look and md.count("#123") == 1
    assert "<summary>23 pass, 47 skip</summary>" in folded and "| pass |" in folded
    html = (tmp_path / "r.html").read_text()
    assert "<b>2</b> overridden" in html and html.count("MLA kernels differ, #123") == 1
    assert html.count('data-overridden="1"') == 2  # the status filter never hides them


def test_validate_verbose_shows_a_rule_an_override_switched_off(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "version: 1\nname: base\nrules:\n"
        "  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0e-9}}\n"
        "  - {id: loss, metric: loss, check: {finite: true}}\n"
    )
    (tmp_path / "child.yaml").write_text(
        "version: 1\nname: child\nextends: base.yaml\noverrides:\n"
        "  - {rule: kl, off: true, reason: 'kernels differ, #9'}\n"
    )
    code, out = _piped("validate", str(tmp_path / "child.yaml"), "-v", config="")
    kl = next(ln for ln in out.splitlines() if ln.startswith("  kl:"))
    loss = next(ln for ln in out.splitlines() if ln.startswith("  loss:"))
    assert code == 0 and " off: true (override: kernels differ, #9)" in kl, out
    assert "off:" not in loss and "override" not in loss
