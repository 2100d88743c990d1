"""Every shell command in README.md and docs/*.md runs as written (issue 29).

A command is a line (with its `\\` continuations) of a ```bash, ```sh or ```shell block, or
a `$ ` line of a ```console block. Each document's commands run in order, in one fresh
directory holding a copy of the repository's examples/, policies/ and scripts/ — so a
later command may read what an earlier one wrote — through bash, with this checkout's
`gatekeeper` first on PATH. A command passes when its exit code is the one its line
states (`# exit N`), else 0. Output is never compared: the console's wording is free to
change; what a reader copies must still run.

The commands that cannot run here are in SKIP, each with its reason: keep it short. No
command, skipped or not, may hold a literal `...` or name a repository path that does
not exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
COPIED = ("examples", "policies", "scripts")

# (pattern searched in the command, why it is not run here)
SKIP: list[tuple[str, str]] = [
    (r"^pip install", "installs from PyPI: network (tests/integrations/test_install.py "
                      "installs the built wheel)"),
    (r"^bash scripts/(demo|test)\.sh", "creates .venv and installs system packages: minutes "
                                       "and network (.ci/run runs scripts/test.sh)"),
    (r"(--|^WANDB_MODE=offline) (python|torchrun) ", "starts a trainer"),
    (r"wandb://|mlflow\+http|prom\+http|\$NEON_DATABASE_URL|\$URL\b",
     "asks a server over the network"),
    (r"(^| )wandb/", "needs a wandb run directory, which a trainer writes (tests/wandb/ read "
                     "real ones)"),
    (r"^gatekeeper check RECORD_DIR |\$GK/|--history out/history\.db$",
     "docs/miles.md's Config example and walkthrough, run from a miles checkout: "
     "tests/miles/test_miles_walkthrough.py runs them in one"),
    (r"\$RECORD_DIR|\$REC\b", "a step of miles' CI job, where the harness sets the record "
                              "directory"),
    (r"history import miles-history\.db", "needs a miles history database "
                                         "(tests/history/ import ones miles' code writes)"),
    (r"^(podman|docker) ", "needs a container runtime"),
    (r"completion (zsh|fish)", "zsh / fish syntax or config; tests/test_cli_completion.py "
                               "loads each script in its shell"),
    (r"^gatekeeper check out/metrics$", "docs/config.md's example of a configured project: "
                                        "tests/test_cli_config.py runs it"),
]

EXIT = re.compile(r"#\s*exit (\d+)")
# flags whose value is a file the command writes, not one that must exist
WRITES = {"-o", "--json", "--junit", "--html", "--tests-out", ">"}
REPO_DIRS = ("policies/", "examples/", "scripts/", "deploy/", "docs/", "bench/")


def commands(doc: Path) -> list[tuple[int, str]]:
    """(line number, command) for every command in the document's shell blocks."""
    out: list[tuple[int, str]] = []
    lang: str | None = None
    pending: tuple[int, str] | None = None
    for no, line in enumerate(doc.read_text().split("\n"), 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            lang = None if lang is not None else fence.group(1)
            continue
        text = line.strip()
        if lang == "console":
            if text.startswith("$ "):
                out.append((no, text[2:]))
            continue
        if lang not in SHELL or not text or (text.startswith("#") and pending is None):
            continue
        start, sofar = pending if pending else (no, "")
        joined = sofar + text
        if joined.endswith("\\"):
            pending = (start, joined[:-1].rstrip() + " ")
        else:
            pending = None
            out.append((start, joined))
    return out


def skipped(cmd: str) -> str | None:
    return next((why for pat, why in SKIP if re.search(pat, cmd)), None)


def missing_paths(cmd: str) -> list[str]:
    """Repository paths the command reads that the repository lacks."""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return [f"unparsable: {cmd}"]
    bad = []
    for prev, word in zip(["", *words[:-1]], words, strict=True):
        if prev in WRITES or not word.startswith(REPO_DIRS):
            continue
        if not (REPO / word).exists() and not list(REPO.glob(word)):
            bad.append(word)
    return bad


def workdir(tmp: Path) -> Path:
    for name in COPIED:
        shutil.copytree(REPO / name, tmp / name)
    return tmp


def run(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO), "HOME": str(cwd), "COLUMNS": "120"}
    env.pop("GITHUB_ACTIONS", None)
    env.pop("GATEKEEPER_CONFIG", None)
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_runs(doc: Path, tmp_path: Path) -> None:
    found = commands(doc)
    cwd = workdir(tmp_path) if found else tmp_path
    failures = []
    for no, cmd in found:
        where = f"{doc.relative_to(REPO)}:{no}"
        if "..." in cmd or "…" in cmd:
            failures.append(f"{where}: a literal ellipsis cannot be run: {cmd}")
        failures += [f"{where}: {p} does not exist: {cmd}" for p in missing_paths(cmd)]
        if skipped(cmd):
            continue
        stated = EXIT.search(cmd)
        want = int(stated.group(1)) if stated else 0
        proc = run(cmd, cwd)
        if proc.returncode != want:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            failures.append(f"{where}: exit {proc.returncode}, the doc expects {want}: {cmd}\n"
                            + "\n".join(f"    {t}" for t in tail))
    assert not failures, "\n".join(failures)


def test_the_extractor_reads_each_block_form(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("```bash\n# a comment\ngatekeeper a \\\n  --b c   # exit 1\n```\n"
                   "```console\n$ gatekeeper d\ngate PASSED\n```\n"
                   "```yaml\nnot: a command\n```\n```sh\ngatekeeper e\n```\n")
    assert commands(doc) == [(3, "gatekeeper a --b c   # exit 1"), (7, "gatekeeper d"),
                             (14, "gatekeeper e")]
    assert EXIT.search(commands(doc)[0][1]).group(1) == "1"  # type: ignore[union-attr]


def test_every_skip_entry_is_used() -> None:
    """A SKIP entry no command needs any more is dropped, so the table stays short."""
    cmds = [cmd for doc in DOCS for _, cmd in commands(doc)]
    unused = [pat for pat, _ in SKIP if not any(re.search(pat, c) for c in cmds)]
    assert not unused


def test_the_readme_policy_is_the_shipped_file() -> None:
    """The README's first policy is examples/quickstart/policy.yaml, word for word."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    shipped = (REPO / "examples/quickstart/policy.yaml").read_text()
    assert shipped in blocks


def test_the_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move detail to docs/"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in doc.read_text().split("\n"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        heading = re.match(r"^#{1,6} (.*)", line)
        if heading and not in_code:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


@pytest.mark.parametrize("doc", [*DOCS, REPO / "bench/RESULTS.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    """A page moved or a heading renamed must not leave a dead link or anchor behind."""
    dead = []
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            dead.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not dead, f"{doc.relative_to(REPO)}: " + "; ".join(dead)
