"""`gatekeeper check SOURCE -p POLICY`: judge a finished run (the CI gate)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekeeper.cli.args import (
    NotifyOptions,
    PlotOptions,
    PolicyOptions,
    add_annotate_arg,
    add_history_args,
    add_notify_args,
    add_policy_args,
    add_report_args,
    add_run_args,
    history_options,
    notify_options,
    plot_options,
    policy_options,
    print_summary,
    report_options,
    run_overrides,
)
from gatekeeper.errors import UsageError

if TYPE_CHECKING:
    from gatekeeper.baselines import HistoryOptions
    from gatekeeper.gate import ReportOptions
    from gatekeeper.policy.spec import PolicySpec
    from gatekeeper.sources.base import RunOverrides


@dataclass(frozen=True)
class CheckOptions:
    """What one `gatekeeper check` was asked to do, parsed from its arguments."""

    source: str
    policy: PolicyOptions
    run: RunOverrides
    report: ReportOptions
    plots: PlotOptions
    history: HistoryOptions | None
    references: dict[str, str]
    annotate: bool
    notify: NotifyOptions | None = None  # --notify, and the CI job the verdict belongs to


def register(sub: Any) -> None:
    p = sub.add_parser("check", help="judge a finished run against policies (CI gate)")
    p.add_argument("source", metavar="SOURCE", help="JSONL record file or run directory")
    add_policy_args(p)
    add_run_args(p)
    add_report_args(p)
    add_annotate_arg(p)
    p.add_argument(
        "--reference", action="append", default=[], metavar="NAME=SOURCE",
        help="an earlier run (record file, run directory, wandb run) that isclose rules "
        "with reference: NAME compare against, step by step (repeatable)",
    )
    add_history_args(p)
    p.add_argument(
        "--record", action="store_true", help="record the run in the --history store afterwards"
    )
    add_notify_args(p)
    p.set_defaults(func=cmd_check, owns_startup=True)


def parse_references(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, eq, source = item.partition("=")
        if not eq or not name or not source:
            raise UsageError(
                f"--reference {item!r}: expected NAME=SOURCE, e.g. --reference grad-norm=ref.jsonl"
            )
        if name in out:
            raise UsageError(f"--reference {name!r} is given twice")
        out[name] = source
    return out


def cmd_check(args: argparse.Namespace) -> int:
    from gatekeeper import gate
    from gatekeeper.cli.main import startup_done

    policy = policy_options(args)
    # policies first: a bad policy is the error reported, whatever else is wrong
    policies = gate.load(list(policy.paths), list(policy.overrides))
    startup_done()  # the policies are built: the run is read with the collector on
    opts = CheckOptions(
        source=args.source,
        policy=policy,
        history=history_options(args),
        references=parse_references(args.reference),
        run=run_overrides(args),
        report=report_options(args),
        plots=plot_options(args),
        annotate=bool(args.annotate),
        notify=notify_options(args),
    )
    return run_check(opts, policies)


def run_check(opts: CheckOptions, policies: list[PolicySpec]) -> int:
    """Judge `opts.source` whole and write every report asked for; the exit code."""
    import sys

    from gatekeeper import gate
    from gatekeeper.cli.report import read_run, wants_run, write_plot_reports
    from gatekeeper.report.color import wants_color
    from gatekeeper.report.text import quiet_lines

    references = gate.read_references(opts.references)
    # Plotting reports need the series: read the run once and judge that.
    run = read_run(opts.source, opts.run, policies) if wants_run(opts.plots) else None
    verdict = gate.check(
        run or opts.source, policies, None if run is not None else opts.run,
        history=opts.history, references=references,
    )
    if opts.notify is not None and (opts.notify.job_name or opts.notify.job_url):
        from gatekeeper.notify.ci import JobInfo, stamp  # the CI job, for `notify` to read

        stamp(verdict, JobInfo(opts.notify.job_name, opts.notify.job_url))
    # files first: a closed stdout (`| head -1`) must not cost a report
    gate.write_files(verdict, opts.report)
    write_plot_reports(verdict, opts.plots, run, opts.source, opts.run)
    gate.print_reports(verdict, opts.report)
    print_summary(verdict, opts.report.quiet)
    if opts.annotate:
        from gatekeeper.annotate import annotate, report_link

        print(annotate(opts.source, verdict, report_link(opts.report.json_path)))
    if opts.report.quiet:
        print("\n".join(quiet_lines(verdict, wants_color(opts.report.color, sys.stdout))))
    if opts.notify is not None and opts.notify.targets:
        from gatekeeper.cli.notify import post

        post(opts.notify, [(opts.source, verdict)], strict=False)
    return verdict.exit_code
