"""`gatekeeper check` through the real CLI in a child process: exit codes and reports."""

from __future__ import annotations

import json

import pytest

from tests.helpers import REPO, gatekeeper, write_policy, write_record

MILES = str(REPO / "policies" / "miles" / "ci-consistency.yaml")
# a miles record carries no config; the pack requires the keys its variants read
DEFAULTS = [
    "--config", "train_backend=megatron",
    "--config", "lora_rank=0", "--config", "multi_latent_attention=false",
    "--config", "num_steps_per_rollout=1", "--config", "use_rollout_routing_replay=false",
]


@pytest.fixture
def broken(tmp_path):
    return write_record(
        tmp_path / "run.jsonl",
        {"train/ppo_kl": [(0, -0.3), (1, 0.001)], "train/pg_clipfrac": [(0, 0.0)], "train/kl_loss": [(0, 0.0)]},
    )


def test_the_signed_check_bug_fails_the_gate(broken, tmp_path):
    out = gatekeeper(
        "check", str(broken), "-p", MILES, *DEFAULTS, "--json", str(tmp_path / "v.json")
    )
    assert out.returncode == 1, out.stderr
    assert "gate FAILED" in out.stdout and "miles-ci-consistency/ppo-kl-rollout-start" in out.stdout
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["status"] == "fail"
    (kl,) = [r for r in report["results"] if r["rule"] == "ppo-kl-rollout-start"]
    assert kl["status"] == "fail" and kl["step"] == 0 and kl["value"] == -0.3
    assert kl["expected"] == "|x| < 1e-09"
    assert kl["source"].endswith("ci-consistency.yaml:49")
    assert set(kl) >= {"policy", "rule", "status", "metric", "step", "value", "expected", "message", "source"}


def test_healthy_example_passes_and_broken_example_fails():
    ok = gatekeeper("check", "examples/runs/healthy", "-p", "policies", cwd=REPO)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = gatekeeper("check", "examples/runs/broken-kl", "-p", "policies", cwd=REPO)
    assert bad.returncode == 1
    assert "recipe-deepseek-v4.1-flash/logprob-gap-step0" in bad.stdout


def test_override_reason_reaches_every_report(broken, tmp_path):
    reason = "MLA kernels differ, tracked in #123"
    out = gatekeeper(
        "check", str(broken), "-p", MILES, *DEFAULTS,
        "--override", f"miles-ci-consistency/ppo-kl-rollout-start=off:{reason}",
        "--json", str(tmp_path / "v.json"), "--junit", str(tmp_path / "j.xml"),
        "--github", "always", env={"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert reason in out.stdout.replace("\n", " ") or "MLA kernels" in out.stdout
    assert reason in (tmp_path / "v.json").read_text()
    assert reason in (tmp_path / "j.xml").read_text()
    assert reason in (tmp_path / "summary.md").read_text()


def test_missing_metric_fails_and_names_it(tmp_path):
    run = write_record(tmp_path / "r.jsonl", {"train/pg_clipfrac": [(0, 0.0)]})
    out = gatekeeper("check", str(run), "-p", MILES, *DEFAULTS)
    assert out.returncode == 1
    assert "metric train/ppo_kl is not in the run" in out.stdout


def test_malformed_policy_exits_2_with_file_and_line(tmp_path, broken):
    bad = write_policy(tmp_path / "bad.yaml", "version: 1\nname: p\nrules:\n  - id: r\n    metric: m\n    check: {abs_max: -1}\n")
    out = gatekeeper("check", str(broken), "-p", str(bad))
    assert out.returncode == 2
    assert "bad.yaml:6: rules[0].check.abs_max.value" in out.stderr and out.stdout == ""


def test_malformed_record_line_exits_2(tmp_path):
    run = tmp_path / "r.jsonl"
    run.write_text('{"metric": "train/ppo_kl", "series": [[0, 0.0]]}\n{"metric": "train/x", "series": [[0, "oops"]]}\n')
    out = gatekeeper("check", str(run), "-p", MILES)
    assert out.returncode == 2
    assert f"{run}:2:" in out.stderr and '"oops"' in out.stderr


def test_bad_arguments_exit_2(broken):
    assert gatekeeper("check", str(broken)).returncode == 2  # no policy
    out = gatekeeper("check", str(broken), "-p", MILES, "--override", "nonsense")
    assert out.returncode == 2 and "expected POLICY/RULE" in out.stderr
    assert gatekeeper("check", "/nonexistent/run.jsonl", "-p", MILES).returncode == 2


def test_run_metadata_flags_drive_when(tmp_path):
    run = write_record(
        tmp_path / "r.jsonl",
        {"train/ppo_kl": [(0, 5e-9)], "train/pg_clipfrac": [(0, 0.0)], "train/kl_loss": [(0, 0.0)]},
    )
    plain = gatekeeper("check", str(run), "-p", MILES, *DEFAULTS)
    assert plain.returncode == 1  # 5e-9 > 1e-9 for a full-weight run
    lora = gatekeeper(
        "check", str(run), "-p", MILES, *DEFAULTS, "--config", "lora_rank=8", "--tag", "e2e"
    )
    assert lora.returncode == 0, lora.stdout  # LoRA runs allow 1e-8


def test_github_annotations_point_at_policy_lines(broken, tmp_path):
    summary = tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    out = gatekeeper("check", str(broken), "-p", MILES, *DEFAULTS, env=env)
    assert out.returncode == 1
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("::error")]
    assert "file=" in line and "ci-consistency.yaml,line=49," in line
    assert "| `miles-ci-consistency/ppo-kl-rollout-start` | fail |" in summary.read_text()


def test_a_step_summary_that_cannot_be_written_is_exit_2_naming_it(broken, tmp_path):
    """$GITHUB_STEP_SUMMARY where no file can be made (a parent that is a file): was exit
    70 (the open's OSError); now exit 2, named in an ::error annotation under Actions."""
    (tmp_path / "a-file").write_text("not a folder")
    summary = tmp_path / "a-file" / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    out = gatekeeper("check", str(broken), "-p", MILES, *DEFAULTS, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    said = out.stdout + out.stderr
    assert f"{summary}: cannot write the step summary ($GITHUB_STEP_SUMMARY)" in said, said


def test_validate_and_checks_commands():
    out = gatekeeper("validate", "policies", cwd=REPO)
    assert out.returncode == 0 and "ok: " in out.stdout
    kinds = gatekeeper("checks").stdout
    assert all(k in kinds for k in ("abs_max", "approx", "between", "max", "min", "reach"))
