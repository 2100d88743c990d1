"""The toolkit commands as a CI user drives them (issue 29): `test -k/-v`, lint rule
codes with --select/--ignore and inline suppressions that need a reason,
`--output-format text|json|github` on lint/test/validate, exit-2 errors as GitHub
annotations under Actions, and `checks [KIND]`. Every case runs the real CLI: through
its entry point in this process (`cli`, for speed), and as a child process (`gatekeeper`)
where the process matters (the terminal width, GitHub Actions' environment) and at least
once per command."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from gatekeeper.checks import registry
from tests.helpers import gatekeeper, gatekeeper_in_process, write_policy

POLICY = """
version: 1
name: p
rules:
  - id: small
    metric: loss
    check: {max: 1}
"""

TESTS = """
tests:
  - name: clip passes
    series: {loss: "0.5 0.7"}
    expect: {small: pass}
  - name: clip fails late
    series: {loss: "0.5 2"}
    expect: {small: {status: fail, step: 1}}
  - name: warn wrongly expected
    series: {loss: "0.5 2"}
    expect: {small: pass}
"""

LINT = """
version: 1
name: q
rules:
  - id: exact  # gatekeeper: noqa GK002 -- an exact probe on purpose
    metric: train/loss
    check: {between: [0.3, 0.3]}
  - id: loose
    metric: train/pg_clipfrac
    check: {max: 0.7}  # gatekeeper: noqa GK004
  - id: strict
    metric: train/pg_clipfrac
    check: {max: 0.5}  # gatekeeper: noqa GK999 -- a typo in the code
  - id: any-share
    metric: train/grad_norm
    check: {fraction: {above: 1, max: 1}}
"""

ANNOTATION = re.compile(r"^::(error|warning|notice) (?:file=([^,]*),line=(\d+),)?title=[^:]*::")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`gatekeeper ARGS` in this process (tests.helpers.gatekeeper_in_process)."""
    return gatekeeper_in_process(*args, env=env)


@pytest.fixture()
def suite(tmp_path):
    write_policy(tmp_path / "p.yaml", POLICY)
    return write_policy(tmp_path / "p.test.yaml", TESTS)


def test_k_selects_by_name_with_and_or_not_and_v_lists_each_case(suite):
    out = gatekeeper("test", str(suite), "-k", "clip and not late", "-v")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        f"PASS {suite}:2: clip passes",
        "ok: 1 of 1 policy tests passed in 1 file(s), 2 deselected by -k",
    ]
    out = cli("test", str(suite), "-k", "(late or wrongly) and not passes")
    assert out.returncode == 1
    assert f"FAIL {suite}:8: warn wrongly expected" in out.stdout
    assert "PASS" not in out.stdout  # without -v only failures are listed
    assert "1 of 2 policy tests passed in 1 file(s), 1 deselected by -k" in out.stdout
    # the file's name is matched too, case-insensitively
    assert "0 deselected" not in cli("test", str(suite), "-k", "P.TEST").stdout


def test_k_that_selects_nothing_exits_5_and_a_broken_expression_exits_2(suite):
    out = cli("test", str(suite), "-k", "nosuchcase")
    assert out.returncode == 5, out.stdout + out.stderr
    assert "no policy test matches -k 'nosuchcase' (3 deselected)" in out.stderr
    for expr, why in [("clip and", "ends too early"), ("(clip", "not closed"),
                      ("clip passes", "unexpected 'passes'"), ("or clip", "'or' where a name")]:
        out = cli("test", str(suite), "-k", expr)
        assert out.returncode == 2 and why in out.stderr, (expr, out.stderr)
        assert out.stderr.count("\n") == 1


def test_test_output_formats_github_and_json(suite):
    out = cli("test", str(suite), "--output-format", "github")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"::error file={suite},line=8,title=gatekeeper test%3A warn wrongly")
    assert "status=fail" in lines[0] and "%0A" in lines[0]  # the diff, kept on one line
    assert lines[1:] == ["FAILED: 2 of 3 policy tests passed in 1 file(s)"]
    doc = json.loads(cli("test", str(suite), "--output-format", "json").stdout)
    assert (doc["passed"], doc["failed"], doc["ok"]) == (2, 1, False)
    assert [(i["line"], i["level"]) for i in doc["items"]] == [
        (2, "notice"), (5, "notice"), (8, "error")
    ]


def test_lint_codes_suppressions_need_a_reason_and_select_ignore(tmp_path):
    policy = write_policy(tmp_path / "q.yaml", LINT)
    out = gatekeeper("lint", str(policy))
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        f"{policy}:7: GK004 q/loose: [shadowed] is shadowed by q/strict ({policy}:10): "
        "x <= 0.5 fails whenever x <= 0.7 does, at the same or higher severity",
        f"{policy}:9: GK100 noqa: [noqa-without-reason] a suppression needs a reason: "
        "`# gatekeeper: noqa CODE -- why`; without one it silences nothing",
        f"{policy}:12: GK101 noqa: [noqa-unknown-code] GK999: no such rule code "
        "(codes: GK001, GK002, GK003, GK004, GK005, GK006, GK007, GK100, GK101, GK102); "
        "this suppression silences nothing",
        f"{policy}:13: GK001 q/any-share: [never-fails] at most 100% of points >= 1: "
        "every share is within that",
        "problems: 4 finding(s) in 4 rules, 1 suppressed inline",
    ]
    # without its comment, the exact rule is a finding: the suppression really silenced it
    bare = write_policy(tmp_path / "bare.yaml", LINT.replace("  # gatekeeper: noqa GK002", "  #"))
    assert "GK002 q/exact: [never-passes]" in cli("lint", str(bare)).stdout
    out = cli("lint", str(policy), "--select", "GK00", "--ignore", "gk001")
    assert [x.split(": ")[1] for x in out.stdout.splitlines()[:-1]] == ["GK004 q/loose"]
    assert out.returncode == 1
    out = cli("lint", str(policy), "--ignore", "GK0,GK1")
    assert out.returncode == 0 and out.stdout.startswith("ok: 0 finding(s)"), out.stdout
    # a suppression above every rule belongs to none: a finding, not a silent no-op
    top = write_policy(tmp_path / "top.yaml", LINT.replace("name: q", "name: q  # gatekeeper: "
                                                           "noqa GK001 -- meant for any-share"))
    out = cli("lint", str(top))
    assert f"{top}:2: GK102 noqa: [noqa-outside-rule]" in out.stdout, out.stdout
    assert "GK001 q/any-share" in out.stdout
    out = cli("lint", str(policy), "--select", "GK9")
    assert out.returncode == 2 and "GK9 is no rule code or prefix" in out.stderr


def test_lint_github_and_json(tmp_path):
    policy = write_policy(tmp_path / "q.yaml", LINT)
    out = cli("lint", str(policy), "--output-format", "github")
    annotations = [ANNOTATION.match(x) for x in out.stdout.splitlines()[:-1]]
    assert [(m[1], m[2], m[3]) for m in annotations if m] == [
        ("error", str(policy), "7"), ("error", str(policy), "9"),
        ("error", str(policy), "12"), ("error", str(policy), "13"),
    ]
    assert "title=gatekeeper lint GK004 shadowed::q/loose: is shadowed" in out.stdout
    doc = json.loads(cli("lint", str(policy), "--output-format", "json").stdout)
    assert (doc["ok"], doc["findings"], doc["suppressed"], doc["rules"]) == (False, 4, 1, 4)
    assert [i["code"] for i in doc["items"]] == ["GK004", "GK100", "GK101", "GK001"]


BROKEN = "version: 1\nname: x\nrules:\n  - id: a\n    metric: m\n    check: {nope: 1}\n"


def test_validate_output_formats_and_exit_2_errors_annotated_under_actions(tmp_path):
    bad = write_policy(tmp_path / "bad.yaml", BROKEN)
    out = gatekeeper("validate", str(bad), "--output-format", "github")
    assert out.returncode == 2
    assert out.stdout.startswith(f"::error file={bad},line=6,title=gatekeeper%3A invalid policy::")
    doc = json.loads(cli("validate", str(bad), "--output-format", "json").stdout)
    (item,) = doc["items"]
    assert doc["ok"] is False and (item["file"], item["line"]) == (str(bad), 6)
    good = write_policy(tmp_path / "good.yaml", POLICY)
    doc = json.loads(cli("validate", str(good), "--output-format", "json").stdout)
    assert doc["ok"] and doc["policies"][0]["rules"] == ["small"]
    # any command's exit-2 error: plain outside Actions, an annotation at file:line inside
    plain = cli("check", "nowhere.jsonl", "-p", str(bad))
    assert plain.returncode == 2 and plain.stderr.startswith(f"gatekeeper: error: {bad}:6: ")
    ci = gatekeeper("check", "nowhere.jsonl", "-p", str(bad), env={"GITHUB_ACTIONS": "true"})
    assert ci.returncode == 2
    assert ci.stderr.startswith(f"::error file={bad},line=6,title=gatekeeper%3A invalid policy::")
    assert ci.stderr.count("\n") == 1
    usage = cli("test", str(good), "-k", "(", env={"GITHUB_ACTIONS": "true"})
    assert usage.returncode == 2 and usage.stderr.startswith("::error title=gatekeeper%3A error::")


def test_checks_lists_whole_sentences_and_each_kind_has_a_page_with_a_valid_example(tmp_path):
    out = gatekeeper("checks", env={"COLUMNS": "100"})
    assert out.returncode == 0
    entries = re.split(r"\n(?=\S)", out.stdout.split("\n\n")[0])
    assert len(entries) == len(registry())
    for entry in entries:
        assert max(map(len, entry.splitlines())) <= 100, entry
        assert entry.rstrip().endswith((".", "\"", ")", "`")), f"cut mid-sentence: {entry}"
    for kind, cls in registry().items():
        page = cli("checks", kind)
        assert page.returncode == 0 and page.stdout.startswith(f"{kind}\n\n")
        doc = " ".join((cls.__module__ and __import__(cls.__module__, fromlist=["x"]).__doc__
                        or "").split())
        assert doc and doc in " ".join(page.stdout.split()), kind  # the whole doc
        example = page.stdout.split("as written):\n\n", 1)[1]
        assert f"check: {{{kind}: " in example
        (tmp_path / f"{kind}.yaml").write_text(example)
    checked = gatekeeper("validate", str(tmp_path))  # every example, as printed
    assert checked.returncode == 0, checked.stderr
    assert f"ok: {len(registry())} policies, {len(registry())} rules" in checked.stdout
    out = cli("checks", "rech")
    assert out.returncode == 2 and "did you mean 'reach'?" in out.stderr
