"""The library entry points the CLI (and CI scripts) call: load, judge, report."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from gatekeeper.errors import GatekeeperError, UsageError
from gatekeeper.model import Run
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.overrides import CliOverride, apply_cli_overrides, parse_override
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.session import judge_whole
from gatekeeper.sources import RunOverrides, open_source
from gatekeeper.verdict import Verdict

if TYPE_CHECKING:
    from gatekeeper.baselines import HistoryOptions


@dataclass(frozen=True)
class ReportOptions:
    """What `Gate.finalize()` (and `gatekeeper check`) writes: `json_path`, `junit_path`
    (files, written atomically), `github` (auto: annotations and step summary when
    GITHUB_ACTIONS=true; always; never), `quiet` (no console report: the default for a
    library call; `quiet=False` prints it on stdout, as `gatekeeper check` does unless
    `-q`), `verbose` (the console adds the table of every rule; `-v`), `show_skipped`,
    `color` (the console's: auto, always, never; see `gatekeeper.report.color`)."""

    json_path: str | None = None
    junit_path: str | None = None
    github: str = "auto"  # auto: when GITHUB_ACTIONS=true | always | never
    quiet: bool = True  # a library call prints no table unless asked; the CLI sets it
    show_skipped: bool = True
    verbose: bool = False  # the console report: the short form unless asked for the table
    color: str = "auto"  # auto: NO_COLOR, FORCE_COLOR, then a terminal | always | never
    extra: dict[str, str] = field(default_factory=dict)


# Policies as a library call takes them: a file or directory, several, or loaded specs.
PolicyInput = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Sequence[PolicySpec]


def load(policy_paths: list[str], overrides: list[CliOverride]) -> list[PolicySpec]:
    return apply_cli_overrides(load_policies(policy_paths), overrides)


def resolve_policies(policies: PolicyInput, overrides: Sequence[str] = ()) -> list[PolicySpec]:
    """Policy paths (as `-p`) loaded, or loaded `PolicySpec`s as they are, with
    `POLICY/RULE=ACTION:REASON` overrides (as `--override`) applied."""
    if isinstance(policies, (str, os.PathLike)):
        policies = [policies]
    items = list(policies)
    if items and all(isinstance(p, PolicySpec) for p in items):
        specs = [p for p in items if isinstance(p, PolicySpec)]
    elif any(isinstance(p, PolicySpec) for p in items):
        raise UsageError("policies: give paths or loaded PolicySpec objects, not both")
    else:
        specs = load_policies([os.fspath(p) for p in items])  # type: ignore[arg-type]
    return apply_cli_overrides(specs, [parse_override(o) for o in overrides])


def check(
    source: str | os.PathLike[str] | Run,
    policies: PolicyInput,
    run_overrides: RunOverrides | None = None,
    history: HistoryOptions | None = None,
    references: dict[str, Run] | None = None,
    *,
    overrides: Sequence[str] = (),
) -> Verdict:
    """Judge a finished run, as `gatekeeper check SOURCE -p POLICY` does; the Verdict
    (`verdict.status`, `verdict.exit_code`: the CLI's 0/1/5, `verdict.results`).

    - `source`: anything `check` reads (a JSONL file, a run directory, `wandb://…`, a
      TensorBoard log dir, `mlflow://…`), or a `Run` already read.
    - `policies`: policy files/directories (as `-p`) or loaded `PolicySpec`s;
      `overrides`: `POLICY/RULE=ACTION:REASON` strings, as `--override`.
    - `run_overrides`: name, tags, config, allowed states (as `--name`, `--config`…).
    - `history`: drift rules read their baselines from this store (and record the run).
    - `references`: name -> an earlier run, what `isclose` rules compare against.

    Missing data is an ERROR, never a pass. Nothing is printed and no file written: pass
    the verdict to `write_reports` for that. A policy or source that cannot be read
    raises a `GatekeeperError` (the CLI's exit 2)."""
    policies = resolve_policies(policies, overrides)
    run = source if isinstance(source, Run) else read_run(os.fspath(source), policies)
    if run_overrides is not None:
        run = run_overrides.apply(run)
    if history is not None:
        from gatekeeper.baselines import judge

        if references:
            raise UsageError("--reference and --history cannot be combined yet")
        return judge(policies, run, history)
    return judge_whole(policies, run, references=references)[1]


def read_references(sources: dict[str, str]) -> dict[str, Run]:
    """Read each reference run whole (any source: record file, directory, wandb run)."""
    return {name: open_source(spec).read() for name, spec in sources.items()}


def read_run(source: str, policies: list[PolicySpec] | None = None) -> Run:
    """Read a finished run whole; with `policies`, also the step-less summary values
    (HF's `train_loss`) of the metrics they ask for that have no history points."""
    src = open_source(source)
    run = src.read()
    # only a source with a summary (wandb) has one to fill: the others skip importing
    # the wandb family (and protobuf) for it
    if policies and getattr(src, "read_summary", None) is not None:
        from gatekeeper.sources.wandb.summary import fill_summary

        fill_summary(src, run, policies)
    return run


def github_enabled(mode: str) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return os.environ.get("GITHUB_ACTIONS") == "true"


def write_reports(verdict: Verdict, opts: ReportOptions, stream: TextIO | None = None) -> None:
    """Every report the options ask for: the files, then what is printed."""
    write_files(verdict, opts)
    print_reports(verdict, opts, stream)


def write_files(verdict: Verdict, opts: ReportOptions) -> None:
    """The file reports (JSON, JUnit, the GitHub step summary), written atomically and
    before anything is printed: a reader of stdout that goes away (`| head -1`) must not
    cost a report. Each reporter is imported only when asked for."""
    if opts.json_path:
        from gatekeeper.report import json_report

        json_report.write(verdict, opts.json_path)
    if opts.junit_path:
        from gatekeeper.report import junit

        junit.write(verdict, opts.junit_path)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and github_enabled(opts.github):
        from gatekeeper.report import github

        github.write_summary(verdict, summary)


def print_reports(verdict: Verdict, opts: ReportOptions, stream: TextIO | None = None) -> None:
    """The console report (rich: not imported for `--quiet`) and the GitHub annotations."""
    stream = stream or sys.stdout
    if not opts.quiet:
        from gatekeeper.report import console

        console.render(
            verdict, stream, show_skipped=opts.show_skipped, color=opts.color,
            verbose=opts.verbose,
        )
    if github_enabled(opts.github):
        from gatekeeper.report import github

        github.emit(verdict, stream, None)


__all__ = [
    "GatekeeperError", "PolicyInput", "ReportOptions", "check", "load", "print_reports",
    "resolve_policies", "write_files", "write_reports",
]
