"""The other CI entry points: the GitLab CI template (its script run with bash, as a
GitLab runner's shell executor runs it), the pre-commit hook (its entry run on the
files its `files` pattern selects, as pre-commit does), and the CLI container image
definition (every COPY source exists; the entrypoint is the CLI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO, write_policy

VENV_BIN = str(Path(sys.executable).parent)


def gitlab_job(tmp: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    template = yaml.safe_load((REPO / "ci/gitlab/gatekeeper.gitlab-ci.yml").read_text())
    job = template[".gatekeeper-check"]
    env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp)}
    env.update({k: str(v) for k, v in job["variables"].items()})
    env.update(variables)
    script = "set -eo pipefail\n" + "\n".join(job["script"])
    return subprocess.run(["bash", "-c", script], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=120)


def test_gitlab_template_gates_and_publishes_junit(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    template = yaml.safe_load((REPO / "ci/gitlab/gatekeeper.gitlab-ci.yml").read_text())
    artifacts = template[".gatekeeper-check"]["artifacts"]
    assert artifacts["when"] == "always"
    assert artifacts["reports"]["junit"] == "gatekeeper-reports/gatekeeper.xml"

    broken = gitlab_job(
        tmp_path, GATEKEEPER_INSTALL="", GATEKEEPER_SOURCE="examples/runs/broken-kl",
        GATEKEEPER_POLICIES="policies/miles policies/rl-health.yaml",
        GATEKEEPER_ARGS="--name nightly",
    )
    assert broken.returncode == 1, broken.stderr
    report = json.loads((tmp_path / "gatekeeper-reports/gatekeeper.json").read_text())
    assert (report["status"], report["run"]["name"]) == ("fail", "nightly")
    assert "<failure" in (tmp_path / "gatekeeper-reports/gatekeeper.xml").read_text()

    relaxed = gitlab_job(
        tmp_path, GATEKEEPER_INSTALL="", GATEKEEPER_SOURCE="examples/runs/broken-kl",
        GATEKEEPER_POLICIES="policies/miles",
        GATEKEEPER_OVERRIDES="miles-ci-consistency/ppo-kl-rollout-start=off:MLA kernels, see #123\n",
    )
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "MLA kernels, see #123" in (tmp_path / "gatekeeper-reports/gatekeeper.xml").read_text()


def precommit_run(repo: Path, files: list[str]) -> subprocess.CompletedProcess[str]:
    """What pre-commit runs: `entry` plus the staged files that match `files`."""
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "gatekeeper-validate")
    assert hook["language"] == "python" and hook["pass_filenames"] is True
    chosen = [f for f in files if re.search(hook["files"], f)]
    env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(repo)}
    return subprocess.run([*hook["entry"].split(), *chosen], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)


def test_precommit_hook_rejects_a_bad_policy_with_file_and_line(tmp_path: Path) -> None:
    good = """
        version: 1
        name: health
        rules:
          - id: loss-finite
            metric: loss
            check: {finite: true}
    """
    write_policy(tmp_path / "policies/health.yaml", good)
    (tmp_path / "README.md").write_text("not a policy\n")
    ok = precommit_run(tmp_path, ["policies/health.yaml", "README.md"])
    assert ok.returncode == 0, ok.stderr
    write_policy(tmp_path / "policies/bad.yaml", good.replace("{finite: true}", "{abs_max: -1}"))
    bad = precommit_run(tmp_path, ["policies/health.yaml", "policies/bad.yaml"])
    assert bad.returncode == 2
    assert "policies/bad.yaml:6: rules[0].check.abs_max" in bad.stderr


def test_cli_containerfile_copies_what_exists_and_runs_the_cli() -> None:
    text = (REPO / "deploy/cli/Containerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (REPO / src).exists(), f"COPY source {src} is not in the repository"
    assert 'ENTRYPOINT ["gatekeeper"]' in lines
    assert "WORKDIR /work" in lines
    assert any(ln.startswith("USER ") and not ln.endswith(" root") for ln in lines)
