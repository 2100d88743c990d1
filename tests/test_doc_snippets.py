"""Every shell command in README.md and docs/*.md runs as written (issue 29).

A command is a line (with its `\\` continuations) of a ```bash, ```sh or ```shell block, or
a `$ ` line of a ```console block; a block of commands under another label (or none) is
refused, so a new page cannot slip past. Each document's commands run in order, in one
fresh directory holding a copy of the repository's examples/, policies/, scripts/ and
tests/data/recipes/ — so a later command may read what an earlier one wrote. A command
passes when its exit code is the one its line states (`# exit N`), else 0; in a console
block the lines under a `$ ` line are its output, compared line for line (`…` stands for
any text within a line), so a count or a line number a page shows cannot go stale.

A plain `gatekeeper ARGS` of a command that neither starts a process nor serves runs
in-process through `gatekeeper.cli.main:main`, the console script's own entry (checked
below), with the working directory and environment a shell would give it: the same code
and exit code as the child process, without a Python start-up and import per command
(~0.5 s each). Anything with shell syntax (pipes, redirections, `$`, `&&`, globs) and any
other program runs through bash with this checkout's `gatekeeper` first on PATH.

The commands that cannot run here are in SKIP, each with its reason: keep it short. No
command, skipped or not, may hold a literal `...` or name a repository path that does
not exist.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
COPIED = ("examples", "policies", "scripts", "tests/data/recipes")

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
    (r"^gatekeeper serve ", "the daemon's config names /etc paths and secrets, and it runs "
                            "until stopped: tests/daemon/ check configs and serve"),
    (r"^gatekeeper watch runs/", "follows a run a trainer is writing: tests/live/ do"),
]

EXIT = re.compile(r"#\s*exit (\d+)")
# flags whose value is a file the command writes, not one that must exist
WRITES = {"-o", "--json", "--junit", "--html", "--tests-out", ">"}
REPO_DIRS = ("policies/", "examples/", "scripts/", "deploy/", "docs/", "bench/", "tests/data/")
# commands that only read and write files: run in-process (the others start processes,
# serve or follow a run)
IN_PROCESS = {"check", "validate", "checks", "history", "test", "export", "suggest",
              "import-recipe", "lint", "report", "sources", "completion"}


@dataclass
class Snippet:
    line: int
    cmd: str
    output: list[str] | None = field(default=None)  # a console block's lines under it


def commands(doc: Path) -> list[Snippet]:
    """Every command in the document's shell and console blocks."""
    out: list[Snippet] = []
    lang: str | None = None
    pending: tuple[int, str] | None = None
    shown: list[str] | None = None  # the output lines of the console command above
    indent = 0
    for no, line in enumerate(doc.read_text().split("\n"), 1):
        fence = re.match(r"^(\s*)```(\w*)", line)
        if fence:
            lang = None if lang is not None else fence.group(2)
            indent, shown = len(fence.group(1)), None
            continue
        text = line.strip()
        if lang == "console":
            if out and out[-1].cmd.endswith("\\") and shown == []:  # a continued command
                out[-1].cmd = out[-1].cmd[:-1].rstrip() + " " + text
            elif text.startswith("$ "):
                shown = []
                out.append(Snippet(no, text[2:], shown))
            elif shown is not None:
                shown.append(line[indent:].rstrip())  # a block under a list item
            continue
        if lang not in SHELL or not text or (text.startswith("#") and pending is None):
            continue
        start, sofar = pending if pending else (no, "")
        joined = sofar + text
        if joined.endswith("\\"):
            pending = (start, joined[:-1].rstrip() + " ")
        else:
            pending = None
            out.append(Snippet(start, joined))
    return out


def unlabelled_commands(doc: Path) -> list[int]:
    """Lines of commands in an unlabelled or text block (which would never run); a
    workflow's `run:` in a yaml block is the CI's to run, not this test's."""
    bad = []
    lang: str | None = None
    for no, line in enumerate(doc.read_text().split("\n"), 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            lang = None if lang is not None else fence.group(1)
        elif lang in ("", "text"):
            if re.match(r"\s*(\$ |gatekeeper [a-z-]+( |$))", line):
                bad.append(no)
    return bad


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


def plain_argv(cmd: str) -> list[str] | None:
    """The arguments of a plain `gatekeeper ARGS` that may run in-process; None when the
    line needs a shell (an operator, an expansion, a glob) or starts a process."""
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return None
    shell_syntax = re.compile(r"^[();<>|&]+$|[$`*?~\[]")
    if words[:1] != ["gatekeeper"] or any(shell_syntax.search(w) for w in words):
        return None
    return words[1:] if words[1:2] and words[1] in IN_PROCESS else None


# what would change the output behind the page's back: CI's annotations, a project config,
# colour forced on (a transcript is plain text)
DROPPED = ("GITHUB_ACTIONS", "GATEKEEPER_CONFIG", "FORCE_COLOR", "NO_COLOR")


def environment(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO), HOME=str(cwd), COLUMNS="120")
    return env


def run(cmd: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """The command's exit code and its stdout and stderr, interleaved as a terminal
    shows them."""
    argv = plain_argv(cmd)
    if argv is None:
        proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=environment(cwd),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout
    from gatekeeper.cli.main import main

    with monkeypatch.context() as patch:
        patch.chdir(cwd)
        for name in DROPPED:
            patch.delenv(name, raising=False)
        patch.setenv("HOME", str(cwd))
        patch.setenv("COLUMNS", "120")
        both = io.StringIO()
        with contextlib.redirect_stdout(both), contextlib.redirect_stderr(both):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's --help
                code = exc.code if isinstance(exc.code, int) else 1
    return code, both.getvalue()


def matches(expected: list[str], got: str) -> bool:
    lines = [ln.rstrip() for ln in got.rstrip("\n").split("\n")]
    while expected and not expected[-1]:
        expected = expected[:-1]
    pats = [re.compile(".*?".join(map(re.escape, e.split("…"))) + r"\Z") for e in expected]
    return len(lines) == len(pats) and all(p.match(ln) for p, ln in zip(pats, lines, strict=True))


def failures_of(doc: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    failures = []
    for snip in commands(doc):
        cmd, where = snip.cmd, f"{doc.relative_to(REPO)}:{snip.line}"
        if "..." in cmd or "…" in cmd:
            failures.append(f"{where}: a literal ellipsis cannot be run: {cmd}")
        failures += [f"{where}: {p} does not exist: {cmd}" for p in missing_paths(cmd)]
        if skipped(cmd):
            continue
        stated = EXIT.search(cmd)
        want = int(stated.group(1)) if stated else 0
        code, out = run(cmd, cwd, monkeypatch)
        if code != want:
            tail = "\n".join(f"    {t}" for t in out.strip().splitlines()[-3:])
            failures.append(f"{where}: exit {code}, the doc expects {want}: {cmd}\n{tail}")
        elif snip.output and not matches(snip.output, out):
            failures.append(f"{where}: the output is not the one shown: {cmd}\n"
                            + "\n".join(f"    {t}" for t in out.rstrip().splitlines()))
    return failures


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_runs(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = workdir(tmp_path) if commands(doc) else tmp_path
    failures = failures_of(doc, cwd, monkeypatch)
    failures += [f"{doc.relative_to(REPO)}:{no}: a command in a block labelled neither "
                 "bash nor console is never run: label it" for no in unlabelled_commands(doc)]
    assert not failures, "\n".join(failures)


def test_in_process_is_the_console_script() -> None:
    """What runs in-process is what `pip install` puts on PATH as `gatekeeper`."""
    scripts = (REPO / "pyproject.toml").read_text().split("[project.scripts]\n", 1)[1]
    assert scripts.startswith('gatekeeper = "gatekeeper.cli.main:main"\n')
    assert plain_argv("gatekeeper check r.jsonl -p 'a b'  # exit 1") == [
        "check", "r.jsonl", "-p", "a b"]
    for shell in ("gatekeeper check r -p p | head -1", "gatekeeper check $R -p p",
                  "gatekeeper check r -p 'policies/*'x", "gatekeeper serve -c c.yaml",
                  "gatekeeper check r -p p > out.txt", "ls && gatekeeper check r -p p"):
        assert plain_argv(shell) is None, shell


def test_the_extractor_reads_each_block_form(tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("```bash\n# a comment\ngatekeeper a \\\n  --b c   # exit 1\n```\n"
                   "```console\n$ gatekeeper d \\\n  -q\ngate PASSED\n```\n"
                   "```yaml\nnot: a command\n```\n```sh\ngatekeeper e\n```\n"
                   "```\n$ gatekeeper f\n```\n")
    assert commands(doc) == [Snippet(3, "gatekeeper a --b c   # exit 1"),
                             Snippet(7, "gatekeeper d -q", ["gate PASSED"]),
                             Snippet(15, "gatekeeper e")]
    assert EXIT.search(commands(doc)[0].cmd).group(1) == "1"  # type: ignore[union-attr]
    assert unlabelled_commands(doc) == [18]
    assert matches(["gate PASSED: …", "  -v: …"], "gate PASSED: x: 1 pass\n  -v: y\n")
    assert not matches(["gate PASSED: …"], "gate PASSED: x\n  -v: y\n")
    assert not matches(["a 71 rules"], "a 72 rules\n")


def test_every_skip_entry_is_used() -> None:
    """A SKIP entry no command needs any more is dropped, so the table stays short."""
    cmds = [snip.cmd for doc in DOCS for snip in commands(doc)]
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


def test_the_architecture_page_names_every_package_and_only_modules_that_exist() -> None:
    """docs/architecture.md is held to the package: a package or top-level module added
    is described there, one moved or removed is no longer named."""
    text = (REPO / "docs/architecture.md").read_text()
    pkg = REPO / "gatekeeper"
    modules = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")}
    ghosts = [name for name in set(re.findall(r"[\w/]+\.py\b", text))
              if not (REPO / name).exists()
              and not any(m == name or m.endswith("/" + name) for m in modules)]
    assert not ghosts, f"named in docs/architecture.md, not in the repository: {ghosts}"
    packages = [f"{d.name}/" for d in pkg.iterdir() if (d / "__init__.py").exists()
                or any(d.glob("*.py"))]
    top = [p.name for p in pkg.glob("*.py") if not p.name.startswith("_")]
    unnamed = [name for name in packages + top if not re.search(rf"\b{re.escape(name)}", text)]
    assert not unnamed, f"not described in docs/architecture.md: {unnamed}"
