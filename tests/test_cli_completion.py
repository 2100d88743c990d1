"""`gatekeeper completion bash|zsh|fish`: the script the CLI prints, loaded into the real
shell, completes commands, subcommands, flags, flag choices and positional choices as
the parser defines them (issue 29). bash is required; zsh and fish run where installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO, gatekeeper

# (words typed, the word being completed last) -> what the shell must offer
CASES = [
    (["ch"], {"check", "checks"}),
    (["check", "run.jsonl", "--col"], {"--color"}),
    (["check", "run.jsonl", "--color", ""], {"auto", "always", "never"}),
    (["check", "run.jsonl", "--github", "a"], {"auto", "always"}),
    (["history", ""], {"record", "show", "mark-untrusted", "import", "migrate"}),
    (["history", "record", "--hi"], {"--history", "--hide-skipped"}),
    (["--debug", "comp"], {"completion"}),
    (["completion", ""], {"bash", "zsh", "fish"}),
    (["check", "-p", "polic"], {"policies"}),  # a flag's free value: a file name
    (["check", "exam"], {"examples"}),  # a leaf's positional: a file name
]


def _script(shell: str, tmp_path: Path) -> Path:
    out = gatekeeper("completion", shell)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.startswith(("# gatekeeper", "#compdef gatekeeper"))
    path = tmp_path / f"gatekeeper.{shell}"
    path.write_text(out.stdout)
    return path


def _shell(argv: list[str], script: str) -> list[str]:
    proc = subprocess.run([*argv, script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


def _quoted(words: list[str]) -> str:
    return " ".join("''" if not w else w for w in words)


def test_bash_completes_from_the_parser(tmp_path):
    script = _script("bash", tmp_path)
    lines = [f"source {script}", "complete -p gatekeeper",
             'comp() { COMP_WORDS=(gatekeeper "$@"); COMP_CWORD=$#; COMPREPLY=(); '
             '_gatekeeper; echo "${COMPREPLY[*]}"; }']
    lines += [f"comp {_quoted(words)}" for words, _ in CASES]
    out = _shell(["bash", "--norc", "--noprofile", "-c"], "\n".join(lines))
    assert out[0] == "complete -o filenames -F _gatekeeper gatekeeper"
    for (words, want), got in zip(CASES, out[1:], strict=True):
        assert set(got.split()) == want, (words, got)


def test_bash_script_follows_the_parser_it_came_from():
    """Every command --help lists is in the script (nothing is hand-kept)."""
    help_text = gatekeeper("--help").stdout
    script = gatekeeper("completion", "bash").stdout
    top = script.split("'') echo '", 1)[1].split("'", 1)[0].split()
    listed = re.findall(r"^    ([a-z][\w-]*)", help_text.split("options:")[0], re.M)
    assert top == listed and "completion" in top


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_from_the_parser(tmp_path):
    """compadd and _files are zsh's completion-widget builtins; outside a widget they
    are stood in for by functions printing what they were given (zsh prefers a function
    to a builtin), and compadd's candidates are filtered by the word typed, as zsh does."""
    script = _script("zsh", tmp_path)
    lines = ["compdef() { :; }",
             'compadd() { shift; print -r -- "${(j: :)${(M)@:#${words[CURRENT]}*}}"; }',
             "_files() { print -r -- @files; }", f"source {script}",
             'comp() { words=(gatekeeper "$@"); CURRENT=${#words}; _gatekeeper; }']
    lines += [f"comp {_quoted(words)}" for words, _ in CASES]
    out = _shell(["zsh", "-f", "-c"], "\n".join(lines))
    for (words, want), got in zip(CASES, out, strict=True):
        files = any(w.startswith(("polic", "exam")) for w in words[-1:])
        assert set(got.split()) == ({"@files"} if files else want), (words, got)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_from_the_parser(tmp_path):
    script = _script("fish", tmp_path)
    lines = [f"source {script}"]
    lines += [f"complete -C {_quoted(['gatekeeper', *words])!r}; echo ---" for words, _ in CASES]
    groups: list[set[str]] = [set()]
    for line in _shell(["fish", "--no-config", "-c"], "\n".join(lines)):
        if line == "---":
            groups.append(set())
        else:  # fish prints "candidate<TAB>description", a directory with its slash
            groups[-1].add(line.split("\t")[0].rstrip("/"))
    for (words, want), offered in zip(CASES, groups[:-1], strict=True):
        assert offered >= want, (words, offered)
