"""Issue 29's hygiene points through the real CLI in a child process: a bare `gatekeeper`,
the one error prefix, "did you mean", and the LICENSE / CHANGELOG a release carries."""

from __future__ import annotations

import re

from tests.console.terminal import on_a_terminal
from tests.helpers import REPO, gatekeeper

COMMANDS = ("check", "validate", "watch", "run", "history")


def test_bare_gatekeeper_prints_help_on_stderr_and_exits_2():
    """As ruff does: the help (every command listed), on stderr, exit 2: no command ran,
    so a CI step `gatekeeper $EMPTY` must not read as a passed gate."""
    out = gatekeeper()
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: gatekeeper")
    assert all(re.search(rf"^\s+{c}\s", out.stderr, re.M) for c in COMMANDS), out.stderr


def test_help_asked_for_is_stdout_and_exit_0():
    out = gatekeeper("--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: gatekeeper") and not out.stderr


def test_mistyped_command_suggests_the_nearest():
    out = gatekeeper("chek", "run.jsonl")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("gatekeeper: error: 'chek' is not a gatekeeper command; "
                                 "did you mean 'check' or 'checks'?"), out.stderr
    far = gatekeeper("zzzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr
    assert "commands: check, validate" in far.stderr


def test_one_error_prefix_naming_the_command():
    """argparse's own complaints carry one `gatekeeper: error:` and name the command once
    (was: "gatekeeper: error: gatekeeper check: ...")."""
    cases = {
        ("check",): "gatekeeper: error: check: the following arguments are required: "
                    "SOURCE; see 'gatekeeper check --help'",
        ("check", "r.jsonl", "-p"): "gatekeeper: error: check: argument -p/--policy: "
                                    "expected one argument; see 'gatekeeper check --help'",
        ("check", "r.jsonl", "-p", "x", "--bogus"):
            "gatekeeper: error: check: unrecognized arguments: --bogus; "
            "see 'gatekeeper check --help'",
        ("--bogus",): "gatekeeper: error: the following arguments are required: COMMAND; "
                      "see 'gatekeeper --help'",
    }
    for argv, line in cases.items():
        out = gatekeeper(*argv)
        assert out.returncode == 2 and out.stderr == line + "\n", (argv, out.stderr)
        assert out.stderr.count("gatekeeper") == 2  # the prefix and the --help pointer


def test_license_is_the_apache_2_text_pyproject_declares():
    text = (REPO / "LICENSE").read_text()
    assert "license = \"Apache-2.0\"" in (REPO / "pyproject.toml").read_text()
    assert "Apache License\n" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert text.count("\n") > 150  # the whole text, not a pointer to it


def test_changelog_has_an_unreleased_section_in_keep_a_changelog_form():
    text = (REPO / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text
    unreleased = text.split("## [Unreleased]", 1)[1]
    assert re.search(r"^### (Added|Changed|Fixed)$", unreleased, re.M)


ESC = "\x1b["
BROKEN = ("check", "examples/runs/broken-kl", "-p", "policies")


def _on_a_pty(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The CLI on a pseudo-terminal 200 columns wide: its exit code and what it showed."""
    return on_a_terminal(*args, columns=200, env=env)


def test_color_auto_on_a_terminal_and_plain_in_a_pipe():
    code, tty = _on_a_pty(*BROKEN)
    assert code == 1 and ESC in tty and "gate FAILED" in tty
    piped = gatekeeper(*BROKEN)
    assert piped.returncode == 1 and ESC not in piped.stdout and "gate FAILED" in piped.stdout


def test_no_color_and_force_color_and_the_flag_winning_over_both():
    code, tty = _on_a_pty(*BROKEN, env={"NO_COLOR": "1"})
    assert code == 1 and ESC not in tty and "gate FAILED" in tty
    forced = gatekeeper(*BROKEN, env={"FORCE_COLOR": "1"})
    assert ESC + "1;31mgate FAILED" in forced.stdout  # bold red verdict, into a pipe
    both = gatekeeper(*BROKEN, env={"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert ESC not in both.stdout  # NO_COLOR is read first, as pytest does
    always = gatekeeper(*BROKEN, "--color", "always", env={"NO_COLOR": "1", "TERM": "dumb"})
    assert ESC in always.stdout
    code, never = _on_a_pty(*BROKEN, "--color", "never", env={"FORCE_COLOR": "1"})
    assert code == 1 and ESC not in never and "gate FAILED" in never
    bad = gatekeeper(*BROKEN, "--color", "sometimes")
    assert bad.returncode == 2 and "check: argument --color: invalid choice" in bad.stderr


def test_mistyped_subcommand_or_choice_suggests_the_nearest():
    sub = gatekeeper("history", "recrod")
    assert sub.returncode == 2 and "did you mean 'record'?" in sub.stderr, sub.stderr
    assert sub.stderr.startswith("gatekeeper: error: history: ") and sub.stderr.count("\n") == 1
    value = gatekeeper("check", "r.jsonl", "--github", "alwys")
    assert value.returncode == 2 and "did you mean 'always'?" in value.stderr, value.stderr
    far = gatekeeper("check", "r.jsonl", "--github", "zzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr


def test_a_number_flag_out_of_range_is_exit_2_naming_it():
    """NaN, an infinity or a number out of range is refused where the flag is read. Was:
    `watch --interval nan` (or inf) exit 70 at the first sleep, `--idle-timeout nan` a
    watch that never ends, `run --grace nan` taken, `suggest --margin nan` bands of NaN
    listed as not banded (exit 0), `--noise nan` no noise limit at all."""
    pos, zero = "(0, 604800] seconds (or 30s, 5m)", "[0, 604800] seconds (or 30s, 5m)"
    cases = {
        ("watch", "r.jsonl", "-p", "p", "--interval", "nan"):
            f"watch: argument --interval: expected a number in {pos}, got 'nan'",
        ("watch", "r.jsonl", "-p", "p", "--interval", "inf"):
            f"watch: argument --interval: expected a number in {pos}, got 'inf'",
        ("watch", "r.jsonl", "-p", "p", "--idle-timeout", "nan"):
            f"watch: argument --idle-timeout: expected a number in {pos}, got 'nan'",
        ("watch", "r.jsonl", "-p", "p", "--progress-every", "-5"):
            f"watch: argument --progress-every: expected a number in {zero}, got '-5'",
        ("run", "-p", "p", "--source", "r.jsonl", "--grace", "nan", "--", "true"):
            f"run: argument --grace: expected a number in {zero}, got 'nan'",
        ("export", "prometheus", "p", "-o", "r.yml", "--interval", "0"):
            f"export: argument --interval: expected a number in {pos}, got '0'",
        ("suggest", "a", "b", "-o", "s.yaml", "--margin", "nan"):
            "suggest: argument --margin: expected a number in [0, 100], got 'nan'",
        ("suggest", "a", "b", "-o", "s.yaml", "--noise", "nan"):
            "suggest: argument --noise: expected a number in (0, 1e+06], got 'nan'",
        ("suggest", "a", "b", "-o", "s.yaml", "--level", "1"):
            "suggest: argument --level: expected a number in (0, 1), like 0.99, got '1'",
        ("import-recipe", "d.md", "-o", "p.yaml", "--about", "0"):
            "import-recipe: argument --about: expected a number in (0, 1) (a relative "
            "tolerance), got '0'",
        ("import-recipe", "d.md", "-o", "p.yaml", "--eval-every", "0"):
            "import-recipe: argument --eval-every: expected a whole number from 1 to "
            "1099511627776, got '0'",
        ("history", "show", "--history", "h.db", "--limit", "99999999999999999999"):
            "history show: argument --limit: expected a whole number from 1 to 1000000, got "
            "'99999999999999999999'",  # exit 70 (past SQLite's INTEGER); -1 listed all
    }
    for argv, line in cases.items():
        out = gatekeeper(*argv)
        command = " ".join(argv[:2]) if argv[0] == "history" else argv[0]
        want = f"gatekeeper: error: {line}; see 'gatekeeper {command} --help'\n"
        assert out.returncode == 2 and out.stderr == want, (argv, out.stderr)


def test_a_duration_flag_takes_the_config_files_grammar():
    """`--interval 250ms --idle-timeout 1s`: the durations of the config files and the
    source URLs, one grammar (yamlfile.seconds)."""
    out = gatekeeper("watch", "examples/quickstart/run.jsonl", "-p",
                     "examples/quickstart/policy.yaml", "--interval", "250ms", "--idle-timeout",
                     "1s", "-q", cwd=REPO)
    assert out.returncode == 0 and "no new point for 1 s" in out.stdout + out.stderr, out


def test_a_source_that_names_nothing_is_exit_2():
    """`""`, `file://` or `tensorboard://` was read as the working directory: `check` said
    ": no such file or directory", `watch` waited and judged a run of no metrics."""
    policy = ("-p", "examples/quickstart/policy.yaml")
    for argv in (("check", "", *policy), ("check", "tensorboard://", *policy),
                 ("watch", "file://", *policy, "--idle-timeout", "1"),
                 ("watch", "tensorboard://", *policy, "--idle-timeout", "1")):
        out = gatekeeper(*argv, cwd=REPO)
        assert out.returncode == 2 and out.stderr == (
            f"gatekeeper: error: source {argv[1]!r} names no run: give its file, directory or "
            "URL (gatekeeper sources lists the forms)\n"), (argv, out.stderr)
