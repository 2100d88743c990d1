"""The GitHub Action (`action.yml`): validated against the action metadata schema, and
its shell steps run as the GitHub runner runs them (tests/integrations/actionrunner.py)
on the shipped example runs, with the documented inputs.

Mirrors GitHub's "Metadata syntax for GitHub Actions" (composite actions, outputs with
`value`) and SchemaStore's github-action.json as of commit 3b6446a (2026-08-07).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import REPO
from tests.integrations.actionrunner import ActionRun, Runner, load_action

SCHEMA = json.loads((REPO / "tests" / "data" / "github-action.schema.json").read_text())
VENV_BIN = str(Path(sys.executable).parent)  # the gatekeeper the tests run


def run_action(tmp: Path, env_extra: dict[str, str] | None = None,
               context: dict[str, str] | None = None, **inputs: str) -> ActionRun:
    workspace = tmp / "workspace"
    if not workspace.exists():
        shutil.copytree(REPO / "examples", workspace / "examples")
        shutil.copytree(REPO / "policies", workspace / "policies")
    inputs.setdefault("install", "false")
    env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp),
           "LANG": "C.UTF-8", **(env_extra or {})}
    return Runner(REPO, workspace, inputs, env, context).run()


def test_action_yml_is_valid_action_metadata() -> None:
    action = load_action(REPO / "action.yml")
    jsonschema.Draft7Validator(SCHEMA).validate(action)
    broken = copy.deepcopy(action)
    del broken["outputs"]["status"]["value"]  # composite outputs need a value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(broken)


def test_upload_step_uploads_the_report_dir_even_after_a_failing_gate() -> None:
    steps = load_action(REPO / "action.yml")["runs"]["steps"]
    upload = next(s for s in steps if s["name"] == "Upload gate reports")
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["path"] == "${{ inputs.report-dir }}"
    assert "always()" in upload["if"]


def test_check_of_a_broken_run_fails_with_outputs_reports_and_summary(tmp_path: Path) -> None:
    result = run_action(tmp_path, source="examples/runs/broken-kl", policies="policies",
                        overrides="")
    gate = result.step("Gate the run")
    assert gate.code == 1, gate.stdout + gate.stderr
    assert result.outputs["status"] == "fail"
    assert "miles-ci-consistency/ppo-kl-rollout-start" in result.outputs["failing"].split(",")
    assert result.outputs["exit-code"] == "1"
    reports = tmp_path / "workspace" / result.outputs["report-dir"]
    assert json.loads((reports / "gatekeeper.json").read_text())["status"] == "fail"
    assert "<testsuite" in (reports / "gatekeeper.xml").read_text()
    assert "::error file=" in gate.stdout  # annotations at the policy file:line
    assert "| rule | status |" in result.summary
    upload = result.step("Upload gate reports")
    assert not upload.skipped and upload.with_["path"] == "gatekeeper-reports"
    assert upload.with_["name"] == "gatekeeper-reports-gate-0"  # the job id, no matrix


def test_check_of_a_healthy_run_passes(tmp_path: Path) -> None:
    result = run_action(tmp_path, source="examples/runs/healthy", policies="policies",
                        reports="json", upload="false")
    assert not result.failed
    assert (result.outputs["status"], result.outputs["failing"]) == ("pass", "")
    assert result.step("Upload gate reports").skipped
    assert not (tmp_path / "workspace" / "gatekeeper-reports" / "gatekeeper.xml").exists()


def test_overrides_args_and_fail_on_gate(tmp_path: Path) -> None:
    result = run_action(
        tmp_path, source="examples/runs/broken-kl",
        policies="policies/miles\npolicies/rl-health.yaml",
        overrides="miles-ci-consistency/kl-loss-step0=off:routing replay, tracked in #1\n"
                  "miles-ci-consistency/pg-clipfrac-rollout-start=warn:noisy, see #2",
        args="--name 'broken kl run' --tag nightly", **{"fail-on-gate": "false"},
    )
    report = json.loads((tmp_path / "workspace/gatekeeper-reports/gatekeeper.json").read_text())
    assert report["run"]["name"] == "broken kl run"
    by_rule = {r["rule"]: r for r in report["results"]}
    assert by_rule["kl-loss-step0"]["status"] == "skip"
    assert by_rule["kl-loss-step0"]["override"] == "routing replay, tracked in #1"
    assert by_rule["pg-clipfrac-rollout-start"]["override"] == "noisy, see #2"
    assert result.step("Gate the run").code == 0  # fail-on-gate: false
    assert result.outputs["status"] == "fail"
    assert "::warning title=gatekeeper::the gate failed" in result.step("Gate the run").stdout


def test_html_report_only_when_the_cli_has_it(tmp_path: Path) -> None:
    result = run_action(tmp_path, source="examples/runs/healthy", policies="policies")
    has_html = "--html" in subprocess.run(
        [sys.executable, "-m", "gatekeeper", "check", "--help"], capture_output=True, text=True
    ).stdout
    html = tmp_path / "workspace/gatekeeper-reports/gatekeeper.html"
    assert html.exists() == has_html
    if not has_html:
        assert "html report skipped" in result.step("Gate the run").stdout


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"source": "examples/runs/healthy", "policies": "policies", "reports": "json pdf"},
         "unknown report 'pdf'"),
        ({"source": "examples/runs/healthy", "policies": "no/such/dir"}, "no/such/dir"),
        ({"policies": "policies"}, "command check needs the source input"),
        ({"source": "examples/runs/healthy", "policies": "policies", "args": "--name 'open"},
         "cannot split the args input"),
    ],
)
def test_could_not_evaluate_is_invalid_not_a_failing_gate(
    tmp_path: Path, inputs: dict[str, str], message: str
) -> None:
    result = run_action(tmp_path, **inputs)
    gate = result.step("Gate the run")
    assert gate.code == 2
    assert result.outputs["status"] == "invalid"
    assert message in gate.stdout + gate.stderr


def test_run_stops_a_training_command_that_goes_nan(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(textwrap.dedent("""
        import json, math, time
        with open("metrics.jsonl", "a") as fh:
            for step in range(600):
                loss = math.nan if step == 3 else 1.0 / (step + 1)
                fh.write(json.dumps({"step": step, "loss": loss}) + "\\n")
                fh.flush()
                time.sleep(0.05)
    """))
    (workspace / "policy.yaml").write_text(textwrap.dedent("""
        version: 1
        name: health
        rules:
          - id: loss-finite
            metric: loss
            check: {finite: true}
    """))
    started = time.monotonic()
    result = run_action(tmp_path, command="run", source="metrics.jsonl", policies="policy.yaml",
                        **{"run-command": f"{sys.executable} train.py"},
                        args="--interval 0.2 --grace 5", reports="json junit")
    assert time.monotonic() - started < 25  # stopped, not run to its 30 s end
    assert result.step("Gate the run").code == 1
    assert (result.outputs["status"], result.outputs["failing"]) == ("error", "health/loss-finite")
    report = json.loads((workspace / "gatekeeper-reports/gatekeeper.json").read_text())
    assert report["stopped"]["step"] == 3


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for python3 in the install step: `-m venv DIR` makes DIR/bin/python (this
# script again) and DIR/bin/gatekeeper (the real CLI); `-m pip install ...` is logged;
# `-c CODE` runs in the real interpreter.
set -euo pipefail
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  printf '#!/usr/bin/env bash\\necho "venv gatekeeper $*" >&2\\nexec %s -m gatekeeper "$@"\\n' \\
    "$REAL_PYTHON" > "$3/bin/gatekeeper"
  chmod +x "$3/bin/gatekeeper"
elif [ "$1" = "-c" ]; then
  exec "$REAL_PYTHON" "$@"
elif [ "$1 $2 $3" = "-m pip install" ]; then
  echo "$@ (PIP_CACHE_DIR=$PIP_CACHE_DIR)" >> "$PIP_LOG"
fi
"""


@pytest.mark.parametrize("version", ["", "gatekeeper==0.1.0"])
def test_install_step_puts_a_fresh_venv_on_path(tmp_path: Path, version: str) -> None:
    """The real install step with a stand-in interpreter (a real install takes minutes):
    a virtualenv under RUNNER_TEMP, the action's checkout (or `version`) pip-installed
    into it, its bin/ on GITHUB_PATH, and the gate step running that gatekeeper."""
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    pip_log = tmp_path / "pip.log"
    result = run_action(tmp_path, {"REAL_PYTHON": sys.executable, "PIP_LOG": str(pip_log)},
                        install="true", python=str(fake), version=version,
                        source="examples/runs/healthy", policies="policies", reports="json")
    install = result.step("Install gatekeeper")
    assert install.code == 0, install.stdout + install.stderr
    venv = tmp_path / "workspace/_runner_temp/gatekeeper-venv"
    assert f"installed gatekeeper 0.1.0 into {venv}" in install.stdout
    installed, cache_dir = pip_log.read_text().rsplit(" (PIP_CACHE_DIR=", 1)
    assert installed.split()[-1] == (version or f"{REPO}[wandb]")  # the checkout + extras
    assert cache_dir == f"{tmp_path}/workspace/_runner_temp/gatekeeper-pip-cache)\n"
    cache = result.step("Cache the install")  # what the install fills, restored next time
    assert cache.uses and cache.with_["path"] == cache_dir[:-2]
    assert "venv gatekeeper check" in result.step("Gate the run").stderr
    assert result.outputs["status"] == "pass"


def test_install_false_needs_a_gatekeeper_on_path(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    meta = load_action(REPO / "action.yml")
    assert meta["inputs"]["install"]["default"] == "true"
    result = Runner(REPO, workspace, {"install": "false", "policies": "p", "source": "s"},
                    {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}).run()
    install = result.step("Install gatekeeper")
    assert install.code == 2
    assert "no gatekeeper on PATH" in install.stdout
    assert result.step("Gate the run").skipped


def test_a_gate_that_judged_nothing_fails_the_step_with_its_own_status(tmp_path: Path) -> None:
    # this checkout's gatekeeper, whatever the venv's console script was installed from
    env = {"PYTHONPATH": str(REPO)}
    workspace = tmp_path / "workspace"
    shutil.copytree(REPO / "examples", workspace / "examples")
    (workspace / "nightly.yaml").write_text(
        "version: 1\nname: nightly\nmatch: {tags: [nightly]}\nrules:\n"
        "  - {id: loss-finite, metric: train/loss, check: {finite: true}}\n"
    )
    result = run_action(tmp_path, env, source="examples/runs/healthy", policies="nightly.yaml",
                        reports="json junit", upload="false")
    gate = result.step("Gate the run")
    assert gate.code == 5, gate.stdout + gate.stderr
    assert (result.outputs["status"], result.outputs["failing"]) == ("nothing_judged", "")
    assert result.outputs["exit-code"] == "5"
    assert "::error title=gatekeeper%3A nothing judged::gate NOTHING JUDGED: " in gate.stdout
    assert "NOTHING JUDGED" in result.summary and "applies to runs tagged nightly" in result.summary
    junit = (workspace / "gatekeeper-reports" / "gatekeeper.xml").read_text()
    assert 'name="nothing-judged"' in junit and 'type="nothing_judged"' in junit

    relaxed = run_action(tmp_path, env, source="examples/runs/healthy", policies="nightly.yaml",
                         reports="json", upload="false", **{"fail-on-gate": "false"})
    assert relaxed.step("Gate the run").code == 0
    assert relaxed.outputs["status"] == "nothing_judged"
    assert "the gate judged nothing" in relaxed.step("Gate the run").stdout
    allowed = run_action(tmp_path, env, source="examples/runs/healthy", policies="nightly.yaml",
                         reports="json", upload="false",
                         args="--allow-nothing-judged 'nightly policy on a PR run'")
    assert not allowed.failed and allowed.outputs["status"] == "pass"


PINNED = re.compile(r"^\s*(?:-\s*)?uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)$")


@pytest.mark.parametrize("path", ["action.yml", ".github/workflows/release.yml"])
def test_sub_actions_are_pinned_by_commit_with_the_tag_named(path: str) -> None:
    """A tag can be moved under a workflow; a commit cannot. Each `uses:` names a full
    commit SHA and, in a comment, the release it is (looked up in each action's own
    repository: v4.6.2 of upload-artifact is the commit its v4 tag pointed at)."""
    lines = [x for x in (REPO / path).read_text().splitlines() if re.match(r"\s*(-\s*)?uses:", x)]
    assert lines
    for line in lines:
        assert PINNED.match(line), f"{path}: not pinned by commit: {line.strip()}"
    pins = {m[1]: (m[2], m[3]) for m in map(PINNED.match, lines) if m}
    known = {
        "actions/upload-artifact": ("ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
        "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
        "actions/cache": ("0057852bfaa89a56745cba8c7296529d2fc39830", "v4.3.0"),
        "actions/checkout": ("11d5960a326750d5838078e36cf38b85af677262", "v4.4.0"),
    }
    for action, pin in pins.items():
        assert known[action] == pin, action


def test_the_default_artifact_name_is_per_job_and_matrix_index(tmp_path: Path) -> None:
    """Matrix jobs share a job id; upload-artifact v4 refuses a second artifact of the
    same name in a workflow run. The default adds the job's matrix index."""
    names = set()
    for index in ("0", "1"):
        result = run_action(tmp_path, context={"github.job": "e2e", "strategy.job-index": index},
                            source="examples/runs/healthy", policies="policies", reports="json")
        assert not result.failed
        names.add(result.step("Upload gate reports").with_["name"])
    assert names == {"gatekeeper-reports-e2e-0", "gatekeeper-reports-e2e-1"}
    given = run_action(tmp_path, source="examples/runs/healthy", policies="policies",
                       reports="json", **{"artifact-name": 'nightly: "a/b"'})
    assert given.step("Upload gate reports").with_["name"] == "nightly- -a-b-"
    off = run_action(tmp_path, source="examples/runs/healthy", policies="policies",
                     reports="json", upload="false")
    assert off.step("Name the artifact").skipped and off.step("Upload gate reports").skipped


def test_the_install_cache_key_names_the_version_the_python_and_the_extras(
    tmp_path: Path,
) -> None:
    """The key changes with what is installed and the interpreter, never holds a comma
    (actions/cache refuses one) and restores from the same runner and Python."""
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {"REAL_PYTHON": sys.executable, "PIP_LOG": str(tmp_path / "pip.log")}

    def key(**inputs: str) -> dict[str, str]:
        result = run_action(tmp_path, env, install="true", python=str(fake),
                            source="examples/runs/healthy", policies="policies", reports="json",
                            **inputs)
        step = result.step("Cache the install")
        assert not step.skipped and step.uses and step.uses.startswith("actions/cache@")
        return step.with_
    py = ".".join(map(str, sys.version_info[:3]))
    plain = key(version="gatekeeper==1.0.0", extras="")
    assert plain["key"].startswith(f"gatekeeper-pip-Linux-X64-py{py}-")
    assert plain["restore-keys"] == f"gatekeeper-pip-Linux-X64-py{py}-"
    other = key(version="gatekeeper==1.0.1", extras="")
    checkout = key(version="", extras="wandb,tensorboard")
    assert len({plain["key"], other["key"], checkout["key"]}) == 3
    assert "," not in checkout["key"] and len(checkout["key"]) < 512
    off = run_action(tmp_path, env, install="true", cache="false", python=str(fake),
                     source="examples/runs/healthy", policies="policies", reports="json")
    assert off.step("Cache the install").skipped and off.step("Key the install cache").skipped
