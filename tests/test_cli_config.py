"""Project config discovery through the real CLI in a child process (issue 29):
`[tool.gatekeeper]` in pyproject.toml or a gatekeeper.yaml found upward from the working
directory, or GATEKEEPER_CONFIG; flags win; the config read is named on stderr; a bad one
is exit 2 naming file:line and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import gatekeeper, write_policy, write_rows

POLICY = """
version: 1
name: p
rules:
  - id: kl
    metric: kl
    check: {abs_max: 0.1}
  - id: loss
    metric: loss
    check: {finite: true}
"""
REASON = "kernels differ, #123"
PYPROJECT = f"""
[project]
name = "trainer"

[tool.gatekeeper]
policies = ["policies"]
overrides = ["p/kl=off:{REASON}"]

[tool.gatekeeper.reports]
json = "out/verdict.json"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A trainer repository: a policy directory, a run whose kl breaks the policy, and a
    subdirectory the commands run from."""
    write_policy(tmp_path / "policies" / "p.yaml", POLICY)
    rows = [{"step": s, "kl": 0.5, "loss": 1.0} for s in range(3)]
    write_rows(tmp_path / "runs" / "r.jsonl", rows)
    (tmp_path / "src" / "deep").mkdir(parents=True)
    return tmp_path


def _check(repo: Path, *args: str, env: dict[str, str] | None = None):
    return gatekeeper("check", str(repo / "runs" / "r.jsonl"), "-q", *args,
                      cwd=repo / "src" / "deep", env={"GATEKEEPER_CONFIG": "", **(env or {})})


def test_pyproject_table_found_upward_sets_policies_overrides_and_reports(repo):
    (repo / "pyproject.toml").write_text(PYPROJECT)
    out = _check(repo)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr == f"gatekeeper: config {repo / 'pyproject.toml'} [tool.gatekeeper]\n"
    verdict = json.loads((repo / "out" / "verdict.json").read_text())  # beside the config
    (kl,) = [r for r in verdict["results"] if r["rule"] == "kl"]
    assert kl["status"] == "skip" and kl["override"] == REASON


def test_flags_win(repo, tmp_path):
    (repo / "pyproject.toml").write_text(PYPROJECT)
    # -p replaces the config's policies, and their override goes with them
    replaced = _check(repo, "-p", str(repo / "policies"), "--json", str(tmp_path / "v.json"))
    assert replaced.returncode == 1 and "  FAIL p/kl: " in replaced.stdout
    assert not (repo / "out").exists()  # --json replaced the config's json path
    # --override is applied after the config's: the flag decides the rule
    warned = _check(repo, "--override", "p/kl=warn:only warn here")
    assert warned.returncode == 0 and "1 warn" in warned.stdout
    off = _check(repo, "--no-config")
    assert off.returncode == 2 and off.stderr.startswith("gatekeeper: error: no policy: pass -p")


def test_gatekeeper_yaml_is_found_first_and_a_plain_pyproject_is_passed_over(repo):
    (repo / "gatekeeper.yaml").write_text(
        "policies: [policies]\noverrides:\n"
        f"  - {{rule: p/kl, action: warn, reason: '{REASON}'}}\n"
    )
    (repo / "pyproject.toml").write_text(PYPROJECT)  # same directory: the YAML file wins
    (repo / "src" / "pyproject.toml").write_text("[project]\nname = 'sub'\n")  # no table
    out = _check(repo)
    assert out.returncode == 0 and "1 warn" in out.stdout, out.stdout + out.stderr
    assert out.stderr == f"gatekeeper: config {repo / 'gatekeeper.yaml'}\n"


def test_the_daemons_gatekeeper_yaml_is_not_a_project_config(repo):
    (repo / "src" / "gatekeeper.yaml").write_text("targets: [{source: x, policies: [p]}]\n")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    out = _check(repo)
    assert out.returncode == 0 and "pyproject.toml [tool.gatekeeper]" in out.stderr


def test_environment_variable_names_the_file(repo, tmp_path):
    (repo / "pyproject.toml").write_text(PYPROJECT)  # found upward, but the variable wins
    ci = tmp_path / "ci" / "gate.toml"
    ci.parent.mkdir()
    ci.write_text(f'policies = ["{repo / "policies"}"]\n')
    out = _check(repo, env={"GATEKEEPER_CONFIG": str(ci)})
    assert out.returncode == 1 and "  FAIL p/kl: " in out.stdout  # no override in gate.toml
    assert out.stderr == f"gatekeeper: config {ci}\n"
    missing = _check(repo, env={"GATEKEEPER_CONFIG": str(tmp_path / "nope.toml")})
    assert missing.returncode == 2 and "GATEKEEPER_CONFIG=" in missing.stderr
    (tmp_path / "ci" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bare = _check(repo, env={"GATEKEEPER_CONFIG": str(tmp_path / "ci" / "pyproject.toml")})
    assert bare.returncode == 2 and "has no [tool.gatekeeper] table; add one" in bare.stderr


BAD = [
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = [\"policies\"]\npolicy = \"x\"\n",
     "pyproject.toml:3: tool.gatekeeper.policy: unknown key; the keys here are policies, "
     "overrides, reports; see docs/config.md"),
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = \"policies\"\n",
     "pyproject.toml:2: tool.gatekeeper.policies: Input should be a valid list, got "
     "\"policies\"; see docs/config.md"),
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = [\"policies\"]\n\n"
     "[tool.gatekeeper.reports]\njson = \"v.json\"\ngithub = \"yes\"\n",
     "pyproject.toml:6: tool.gatekeeper.reports.github: Input should be 'auto', 'always' "
     "or 'never', got \"yes\"; see docs/config.md"),
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = [\"policies\"]\n\n"
     "[[tool.gatekeeper.overrides]]\nrule = \"p/kl\"\naction = \"off\"\n",
     "pyproject.toml:4: tool.gatekeeper.overrides[0].reason: is required; see docs/config.md"),
    ("pyproject.toml", "[tool.gatekeeper\npolicies = 1\n",
     "pyproject.toml:1: not valid TOML: Expected ']' at the end of a table declaration"),
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = [\"policies\",\n  \"nope\"]\n",
     "pyproject.toml:2: tool.gatekeeper.policies[1]: nope does not exist (paths are "
     "relative to .); fix the path or remove it"),
    ("pyproject.toml", "[tool.gatekeeper]\npolicies = [\"policies\"]\n"
     "overrides = [\"p/nope=off:why\"]\n",
     "pyproject.toml:3: override 'p/nope=off:why': policy p has no rule 'nope' "
     "(rules: kl, loss)"),
    ("pyproject.toml", "[project]\nname = \"x\"\n\n[tool]\ngatekeeper = 1\n",
     "pyproject.toml:5: tool.gatekeeper must be a table; write [tool.gatekeeper]"),
    ("gatekeeper.yaml", "policies: [policies]\nreports:\n  json: v.json\n  colour: never\n",
     "gatekeeper.yaml:4: reports.colour: unknown key; the keys here are json, junit, html, "
     "github, color; see docs/config.md"),
    ("gatekeeper.yaml", "policies: [policies]\noverrides:\n  - p/kl=off\n",
     "gatekeeper.yaml:3: override 'p/kl=off': give the reason after a colon"),
]


@pytest.mark.parametrize("name, text, line", BAD, ids=[b[2].split(": ")[1][:30] for b in BAD])
def test_a_bad_config_is_exit_2_naming_file_line_and_the_fix(repo, name, text, line):
    (repo / name).write_text(text)
    out = gatekeeper("check", "runs/r.jsonl", "-q", cwd=repo, env={"GATEKEEPER_CONFIG": ""})
    assert out.returncode == 2 and out.stdout == "", out.stdout
    error = out.stderr.splitlines()[-1]
    assert error.startswith(f"gatekeeper: error: {line}"), error


def test_the_configs_docs_config_md_shows_are_read_as_it_says(tmp_path):
    """Each TOML and YAML example of docs/config.md, saved where it says (pyproject.toml,
    gatekeeper.yaml) in a repository holding the shipped policies, gates the healthy
    example run without -p (the overrides fragment, which sets no policies, with -p)."""
    import os
    import re

    from tests.helpers import REPO

    text = (REPO / "docs" / "config.md").read_text()
    blocks = re.findall(r"```(toml|yaml)\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for i, (lang, body) in enumerate(blocks):
        root = tmp_path / f"repo{i}"
        root.mkdir()
        os.symlink(REPO / "policies", root / "policies")
        name = "pyproject.toml" if lang == "toml" else "gatekeeper.yaml"
        (root / name).write_text(body)
        flags = () if "policies" in body else ("-p", "policies")
        out = gatekeeper("check", str(REPO / "examples" / "runs" / "healthy"), "-q", *flags,
                         cwd=root, env={"GATEKEEPER_CONFIG": ""})
        assert out.returncode == 0, (body, out.stdout + out.stderr)
        assert out.stderr.startswith(f"gatekeeper: config {name}"), out.stderr
