"""A reader of gatekeeper's output that goes away (`| head -1`, `| head -0`, `| true`)
never changes the exit code and never costs a file report: real child processes behind a
real pipe that is closed early, for every command that prints and every exit code."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, write_policy, write_rows

POLICIES = str(REPO / "policies")
HEALTHY = str(REPO / "examples" / "runs" / "healthy")
BROKEN = str(REPO / "examples" / "runs" / "broken-kl")
GK = f"{shlex.quote(sys.executable)} -m gatekeeper"


def piped(command: str, reader: str, cwd: Path) -> tuple[int, str, str]:
    """`command | reader` under bash with pipefail: gatekeeper's own exit status (from
    PIPESTATUS), what the reader printed, and gatekeeper's stderr (kept in a file)."""
    script = (
        f"set -o pipefail; {command} 2>err.txt | {reader}; "
        'echo "GK_STATUS=${PIPESTATUS[0]}"'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    out = subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )
    shown, _, status = out.stdout.rpartition("GK_STATUS=")
    return int(status), shown, (cwd / "err.txt").read_text()


# a long stdout: the pipe's buffer (64 KiB) fills before the reader's exit is noticed
MANY_RULES = "".join(
    f"  - {{id: r{i}, metric: train/loss, check: {{finite: true}}}}\n" for i in range(400)
)


@pytest.mark.parametrize("reader", ["head -1", "head -0", "true"])
def test_check_on_a_passing_run_exits_0_and_writes_every_report(tmp_path, reader):
    status, shown, err = piped(
        f"{GK} check {HEALTHY} -p {POLICIES} --json v.json --junit j.xml --html r.html",
        reader, tmp_path,
    )
    assert status == 0, err
    assert err == ""  # no "Broken pipe", no internal error
    assert json.loads((tmp_path / "v.json").read_text())["status"] == "pass"
    assert "<testsuites" in (tmp_path / "j.xml").read_text()
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    if reader == "head -1":
        assert shown.startswith("gate PASSED: ")


def test_a_long_report_into_a_closed_pipe_keeps_every_exit_code(tmp_path):
    run = write_rows(tmp_path / "run.jsonl", [{"step": s, "train/loss": 1.0} for s in range(3)])
    ok = write_policy(tmp_path / "ok.yaml", "version: 1\nname: ok\nrules:\n" + MANY_RULES)
    bad = write_policy(
        tmp_path / "bad.yaml",
        "version: 1\nname: bad\nrules:\n" + MANY_RULES.replace("{finite: true}", "{max: 0.5}"),
    )
    nothing = write_policy(
        tmp_path / "none.yaml", "version: 1\nname: none\nmatch: {tags: [nightly]}\nrules:\n"
        + MANY_RULES,
    )
    cases = ((ok, 0, "pass"), (bad, 1, "fail"), (nothing, 5, "nothing_judged"))
    for policy, code, verdict in cases:
        for quiet in ("", "-q"):
            status, _, err = piped(
                f"{GK} check {run} -p {policy} {quiet} --json v.json --github always",
                "head -0", tmp_path,
            )
            assert (status, err) == (code, ""), (policy.name, quiet, err)
            assert json.loads((tmp_path / "v.json").read_text())["status"] == verdict
            (tmp_path / "v.json").unlink()


def test_check_that_cannot_evaluate_exits_2_with_its_pipes_closed(tmp_path):
    status, _, _ = piped(f"{GK} check {tmp_path}/missing.jsonl -p {POLICIES}", "head -0", tmp_path)
    assert status == 2
    both = subprocess.run(  # stderr into the closed pipe too: the one error line is lost,
        ["bash", "-c", f"set -o pipefail; {GK} check {tmp_path}/missing.jsonl -p {POLICIES} "
         '2>&1 | head -0; echo "${PIPESTATUS[0]}"'],  # the code is not
        capture_output=True, text=True, timeout=120,
    )
    assert both.stdout.strip() == "2", both.stderr


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (f"validate -v {POLICIES}", 0),
        (f"lint {POLICIES}", None),  # whatever lint says of the shipped policies
        ("checks", 0),
        ("--version", 0),
        ("check --help", 0),
        (f"check {BROKEN} -p {POLICIES}", 1),
    ],
)
@pytest.mark.parametrize("reader", ["head -0", "true", "head -1"])
def test_every_command_keeps_its_exit_code_when_the_reader_goes_away(
    tmp_path, command, code, reader
):
    # the exit code with stdout read in full, then with the reader gone
    full = subprocess.run(
        ["bash", "-c", f"{GK} {command} > out.txt"], cwd=tmp_path, timeout=120,
        capture_output=True, text=True,
    )
    assert code is None or full.returncode == code, full.stderr
    assert (tmp_path / "out.txt").stat().st_size > 0
    status, _, err = piped(f"{GK} {command}", reader, tmp_path)
    assert status == full.returncode and "Error" not in err and "internal" not in err, err


def test_an_internal_error_still_exits_70_into_a_closed_pipe(tmp_path):
    policy = write_policy(tmp_path / "p.yaml", "version: 1\nname: p\nrules:\n" + MANY_RULES)
    crash = (
        "import sys, gatekeeper.cli.main as c, gatekeeper.cli.validate as v\n"
        "def boom(a): print('x' * 100000); raise RuntimeError('bug')\n"
        "v.cmd_validate = boom\n"
        f"sys.exit(c.main(['validate', {str(policy)!r}]))\n"
    )
    (tmp_path / "crash.py").write_text(crash)
    status, _, err = piped(f"{shlex.quote(sys.executable)} crash.py", "head -0", tmp_path)
    assert status == 70 and "internal error" in err and "RuntimeError: bug" in err, err


def test_watch_into_a_closed_pipe_writes_its_report_and_keeps_its_code(tmp_path):
    rows = [{"train/step": s, "train/ppo_kl": 1e-10} for s in range(50)]
    run = write_rows(tmp_path / "m.jsonl", [*rows, {"event": "end", "state": "finished"}])
    policy = write_policy(
        tmp_path / "p.yaml",
        "version: 1\nname: p\nrules:\n"
        "  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0e-6}}\n",
    )
    proc = subprocess.Popen(  # the reader closes its end before gatekeeper writes a line
        [sys.executable, "-m", "gatekeeper", "watch", str(run), "-p", str(policy),
         "--interval", "0.1", "--json", str(tmp_path / "v.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads((tmp_path / "v.json").read_text())["status"] == "pass"
