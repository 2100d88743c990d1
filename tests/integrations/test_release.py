"""The release flow (.github/workflows/release.yml running ci/github/release.sh): a tag
vX.Y.Z that matches pyproject.toml and has a CHANGELOG.md entry moves the major tag (the
`@v1` the docs tell users to write) to the release commit on the remote, and the entry
becomes the release notes. The script runs for real on throwaway git repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.helpers import REPO

SCRIPT = REPO / "ci" / "github" / "release.sh"
CHANGELOG = """# Changelog

## [Unreleased]

- not shipped yet

## [{new}] - 2026-12-06

### Fixed

- the {new} fix

## [1.0.0] - 2026-11-01

- the first release
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def release_commit(repo: Path, version: str, entry: str | None = None) -> None:
    (repo / "pyproject.toml").write_text(f'[project]\nname = "gatekeeper"\nversion = "{version}"\n')
    (repo / "CHANGELOG.md").write_text(CHANGELOG.format(new=entry or version))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"release {version}")
    git(repo, "tag", f"v{version}")


def setup(tmp: Path) -> tuple[Path, Path]:
    origin, repo = tmp / "origin.git", tmp / "repo"
    git(tmp, "init", "-q", "--bare", str(origin))
    git(tmp, "init", "-q", str(repo))
    for key, value in (("user.name", "t"), ("user.email", "t@example.invalid")):
        git(repo, "config", key, value)
    git(repo, "remote", "add", "origin", str(origin))
    return origin, repo


def release(repo: Path, tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), tag], cwd=repo, capture_output=True, text=True)


def test_each_release_moves_the_major_tag_and_its_changelog_entry_is_the_notes(tmp_path):
    origin, repo = setup(tmp_path)
    release_commit(repo, "1.0.0")
    first = release(repo, "v1.0.0")
    assert first.returncode == 0, first.stderr
    assert git(origin, "rev-parse", "v1^{commit}") == git(repo, "rev-parse", "v1.0.0^{commit}")
    release_commit(repo, "1.1.0")
    out = release(repo, "v1.1.0")
    assert out.returncode == 0, out.stderr
    assert git(origin, "rev-parse", "v1^{commit}") == git(repo, "rev-parse", "v1.1.0^{commit}")
    notes = (repo / "release-notes.md").read_text()
    assert "the 1.1.0 fix" in notes
    assert "not shipped yet" not in notes and "the first release" not in notes


def test_no_changelog_entry_or_a_wrong_version_is_no_release(tmp_path):
    origin, repo = setup(tmp_path)
    release_commit(repo, "1.0.0")
    assert release(repo, "v1.0.0").returncode == 0
    before = git(origin, "rev-parse", "v1")
    release_commit(repo, "1.0.1", entry="1.0.9")  # the entry names another version
    out = release(repo, "v1.0.1")
    assert out.returncode == 1 and "no `## [1.0.1]` section" in out.stderr
    git(repo, "tag", "v1.0.2")  # pyproject.toml still says 1.0.1
    out = release(repo, "v1.0.2")
    assert out.returncode == 1 and 'pyproject.toml says version = "1.0.1"' in out.stderr
    out = release(repo, "v1.0")
    assert out.returncode == 1 and "is not vMAJOR.MINOR.PATCH" in out.stderr
    assert git(origin, "rev-parse", "v1") == before  # v1 never moved


def test_the_workflow_runs_the_script_on_version_tags_with_write_access():
    flow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    on = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on` as true
    assert on["push"]["tags"] == ["v[0-9]+.[0-9]+.[0-9]+"]
    assert flow["permissions"] == {"contents": "write"}
    steps = flow["jobs"]["release"]["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0  # the tags, to move one
    assert 'ci/github/release.sh "$TAG"' in steps[1]["run"]
    assert "--notes-file release-notes.md" in steps[2]["run"]

