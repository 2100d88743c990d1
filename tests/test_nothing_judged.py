"""A gate that judged nothing is not a pass: every way a policy can skip all its gating
rules (match, when, if_logged, an override switching them off, no gating rule at all),
through the real CLI in a child process, with its JSON and JUnit reports; exit 5 (pytest's
"no tests ran"), relaxable with a reason like any rule."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from gatekeeper.verdict import GateStatus, Mode, RuleResult, Severity, Status, Verdict
from tests.helpers import REPO, gatekeeper, write_policy, write_rows

JUNIT = xmlschema.XMLSchema(str(REPO / "tests" / "data" / "junit-4.xsd"))
ROWS = [{"train/step": s, "train/ppo_kl": 1e-10, "train/loss": 1.0 / (s + 1)} for s in range(5)]
RULES = """
rules:
  - {id: kl-zero, metric: train/ppo_kl, check: {abs_max: 1.0e-6}WHEN}
  - {id: loss-finite, metric: train/loss, check: {finite: true}WHEN}
"""

# way -> (policy head, rule suffix, extra CLI args, words the verdict line must show)
WAYS = {
    "match": ("match: {tags: [nightly]}\n", "", [], "applies to runs tagged nightly"),
    "when": (
        "", ", when: {config.lora_rank: {gt: 0}}", ["--config", "lora_rank=0"],
        "not applicable: needs config.lora_rank > 0 (run has 0)",
    ),
    "if_logged": ("", "", [], "not logged by this run (if_logged)"),
    "override": (
        "", "",
        ["--override", "p/kl-zero=off:kernels differ, #12",
         "--override", "p/loss-finite=off:kernels differ, #12"],
        "switched off by override: kernels differ, #12",
    ),
}


def _policy(tmp: Path, way: str, extra: str = "") -> Path:
    head, when, _, _ = WAYS[way]
    rules = RULES.replace("WHEN", when)
    if way == "if_logged":  # metrics this run never logs, judged only if logged
        rules = rules.replace("train/", "eval/").replace("}}", "}, if_logged: true}")
    return write_policy(tmp / "p.yaml", f"version: 1\nname: p\n{head}{extra}{rules}")


def _check(tmp: Path, policy: Path, *args: str):
    run = write_rows(tmp / "run.jsonl", ROWS)
    out = gatekeeper(
        "check", str(run), "-p", str(policy), "--json", str(tmp / "v.json"),
        "--junit", str(tmp / "j.xml"), *args,
    )
    return out, json.loads((tmp / "v.json").read_text()), (tmp / "j.xml").read_text()


def _nothing_case(junit: str) -> ET.Element:
    JUNIT.validate(junit)
    root = ET.fromstring(junit)
    (case,) = root.findall(".//testcase[@name='nothing-judged']")
    return case


@pytest.mark.parametrize("way", WAYS)
def test_each_way_of_skipping_every_rule_is_nothing_judged_exit_5(tmp_path, way):
    out, verdict, junit = _check(tmp_path, _policy(tmp_path, way), *WAYS[way][2])
    assert out.returncode == 5, out.stdout + out.stderr
    # the verdict line, then why on a line of its own; the JUnit message joins the two
    # (an override switching them off adds a line each, counted on the verdict line)
    head, *rest = out.stdout.splitlines()
    overridden = " (2 overridden)" if way == "override" else ""
    assert head == f"gate NOTHING JUDGED: run: 2 skip{overridden}", out.stdout
    why = rest[2 if overridden else 0]
    assert why.startswith("  all 2 gating rules skipped: "), out.stdout
    assert "p/kl-zero" in why and "p/loss-finite" in why and WAYS[way][3] in why, why
    line = f"{head} — {why.strip()}"
    assert "PASSED" not in out.stdout
    assert verdict["status"] == "nothing_judged" and verdict["counts"]["skip"] == 2
    assert verdict["nothing_judged_allowed"] is None
    case = _nothing_case(junit)
    error = case.find("error")
    assert error is not None and error.get("type") == "nothing_judged"
    assert error.get("message") == line
    root = ET.fromstring(junit)
    assert root.get("errors") == "1" and root.get("failures") == "0"


def test_a_gate_with_no_gating_rule_judges_nothing(tmp_path):
    # (a policy without rules is refused when it loads: exit 2)
    warn = write_policy(
        tmp_path / "p.yaml",
        "version: 1\nname: p\nrules:\n"
        "  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0e-12}, severity: warn}\n",
    )
    out, verdict, junit = _check(tmp_path, warn)
    assert out.returncode == 5, out.stdout  # a warning is no verdict on the run
    assert "no enforce-mode, fail-severity rule to judge (1 warn-severity or shadow-mode)" in (
        out.stdout
    )
    assert [r["status"] for r in verdict["results"]] == ["warn"]
    assert verdict["status"] == "nothing_judged"
    _nothing_case(junit)


def test_one_judged_rule_beside_skipped_ones_is_a_pass(tmp_path):
    policy = write_policy(
        tmp_path / "p.yaml",
        "version: 1\nname: p\nrules:\n"
        "  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0e-6}}\n"
        "  - {id: gone, metric: eval/x, check: {finite: true}, if_logged: true}\n",
    )
    out, verdict, junit = _check(tmp_path, policy)
    assert out.returncode == 0 and verdict["status"] == "pass", out.stdout
    assert "nothing-judged" not in junit and "nothing judged" not in out.stdout


def test_the_flag_relaxes_it_with_a_reason_every_report_shows(tmp_path):
    reason = "nightly-only policy on a PR run"
    out, verdict, junit = _check(
        tmp_path, _policy(tmp_path, "match"), "--allow-nothing-judged", reason
    )
    assert out.returncode == 0, out.stdout + out.stderr
    head, why = out.stdout.splitlines()[:2]
    assert head == "gate PASSED: run: 2 skip", out.stdout
    assert why.startswith(f"  nothing judged (allowed: {reason}): "), out.stdout
    assert verdict["status"] == "pass" and verdict["nothing_judged_allowed"] == reason
    skipped = _nothing_case(junit).find("skipped")
    assert skipped is not None and reason in skipped.get("message", "")
    blank = gatekeeper("check", str(tmp_path / "run.jsonl"), "-p", str(tmp_path / "p.yaml"),
                       "--allow-nothing-judged", " ")
    assert blank.returncode == 2 and "--allow-nothing-judged: give the reason" in blank.stderr


def test_a_policy_relaxes_it_even_when_its_match_does_not_hold(tmp_path):
    extra = 'allow_nothing_judged: "runs only on nightly builds"\n'
    out, verdict, _ = _check(tmp_path, _policy(tmp_path, "match", extra))
    assert out.returncode == 0, out.stdout + out.stderr
    assert verdict["nothing_judged_allowed"] == "policy p: runs only on nightly builds"
    assert "allowed: policy p: runs only on nightly builds" in out.stdout
    # a shadow policy's allowance counts when every policy is shadow (a report-only gate) ...
    shadow = _policy(tmp_path, "match", extra + "mode: shadow\n")
    out, verdict, _ = _check(tmp_path, shadow)
    assert out.returncode == 0, out.stdout + out.stderr
    assert verdict["nothing_judged_allowed"] == "policy p: runs only on nightly builds"
    # ... and never excuses an enforce policy beside it that judged nothing
    write_policy(tmp_path / "q.yaml", "version: 1\nname: q\nmatch: {tags: [nightly]}\n"
                 + RULES.replace("WHEN", ""))
    both = gatekeeper("check", str(tmp_path / "run.jsonl"), "-p", str(shadow), "-p",
                      str(tmp_path / "q.yaml"))
    assert both.returncode == 5, both.stdout + both.stderr
    blank = _policy(tmp_path, "match", 'allow_nothing_judged: ""\n')
    out = gatekeeper("validate", str(blank))
    assert out.returncode == 2 and "p.yaml:4" in out.stderr and "give the reason" in out.stderr


def test_a_saved_verdict_reads_back_with_its_status(tmp_path):
    _, data, _ = _check(tmp_path, _policy(tmp_path, "match"))
    again = Verdict.from_dict(data)
    assert again.status is GateStatus.NOTHING and again.exit_code == 5
    relaxed = Verdict.from_dict({**data, "nothing_judged_allowed": "why"})
    assert relaxed.status is GateStatus.PASS and relaxed.exit_code == 0


def _result(status: Status, severity: Severity = Severity.FAIL) -> RuleResult:
    return RuleResult(policy="p", rule="r", status=status, severity=severity,
                      mode=Mode.ENFORCE, metric="m", message="", source="p.yaml:3")


def test_live_nothing_judged_yet_is_pending_or_pass_only_final_is_nothing():
    skipped = [_result(Status.SKIP)]
    assert Verdict(run={}, results=skipped, final=False).status is GateStatus.PASS
    waiting = [*skipped, _result(Status.PENDING)]
    assert Verdict(run={}, results=waiting, final=False).status is GateStatus.PENDING
    assert Verdict(run={}, results=skipped, final=True).status is GateStatus.NOTHING
    failing = [*skipped, _result(Status.ERROR)]
    assert Verdict(run={}, results=failing, final=True).status is GateStatus.ERROR
    warned = [_result(Status.WARN, Severity.WARN)]
    assert Verdict(run={}, results=warned, final=True).exit_code == 5


def test_annotate_tags_the_run_nothing_judged_and_replaces_an_old_gate_tag(tmp_path):
    from gatekeeper.sources.wandb.annotate import new_tags

    run_dir = tmp_path / "run"
    write_rows(run_dir / "metrics.jsonl", ROWS)
    out = gatekeeper("check", str(run_dir), "-p", str(_policy(tmp_path, "match")), "--annotate")
    assert out.returncode == 5, out.stdout + out.stderr
    written = json.loads((run_dir / "gatekeeper-verdict.json").read_text())
    assert written["tag"] == "gate:nothing_judged" and written["status"] == "nothing_judged"
    assert new_tags(["x", "gate:nothing_judged"], "gate:pass") == ["x", "gate:pass"]
