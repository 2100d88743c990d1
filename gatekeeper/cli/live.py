"""What `watch` and `run` share: the follow options, the live gate loop they drive, and the
reports written when it stops (the same as `check`'s, with when and why it stopped).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gatekeeper.cli.args import (
    plot_options,
    policy_options,
    report_options,
    run_overrides,
    seconds,
    try_report_paths,
)

if TYPE_CHECKING:
    from gatekeeper.cli.args import NotifyOptions
    from gatekeeper.live.loop import Follower, LoopSettings, Outcome
    from gatekeeper.live.process import ChildGroup
    from gatekeeper.verdict import Verdict

# The default poll interval, kept here so that building the parser does not import the
# live loop; tests/test_startup.py checks it equals live.loop.DEFAULT_INTERVAL.
DEFAULT_INTERVAL = 1.0


def add_follow_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--interval",
        type=seconds(),
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between polls (default {DEFAULT_INTERVAL:g})",
    )
    p.add_argument(
        "--idle-timeout",
        type=seconds(),
        default=None,
        metavar="SECONDS",
        help="treat the run as ended after this long without a new point (default: never)",
    )
    p.add_argument(
        "--progress-every",
        type=seconds(zero=True),
        default=30.0,
        metavar="SECONDS",
        help="outside a terminal, print the progress line at most this often (default 30)",
    )


def _settings(args: argparse.Namespace, grace: float = 30.0) -> LoopSettings:
    from gatekeeper.live.loop import LoopSettings

    return LoopSettings(interval=args.interval, idle_timeout=args.idle_timeout, grace=grace)


def open_follower(
    args: argparse.Namespace,
    source: str,
    grace: float,
    child: ChildGroup | None = None,
    *,
    cmd: bool = False,
) -> Follower:
    import time

    from gatekeeper import gate
    from gatekeeper.live.detect import open_follow_source
    from gatekeeper.live.gate import LiveGate
    from gatekeeper.live.loop import Follower
    from gatekeeper.live.progress import Printer

    policy = policy_options(args)
    policies = gate.load(list(policy.paths), list(policy.overrides))
    try_report_paths(args)
    _warn_unset_notify(args)
    settings = _settings(args, grace)
    printer = Printer(sys.stdout, progress_every=args.progress_every, quiet=args.quiet)
    # opened before CMD starts: the runs already in a wandb folder are not the one to gate
    followed = open_follow_source(source, printer.say, for_command=cmd)
    live = LiveGate(followed, policies, run_overrides(args), started=time.time())
    return Follower(live, settings, printer, child)


def _warn_unset_notify(args: argparse.Namespace) -> None:
    """`run --notify`: say before CMD starts that a card cannot be posted (its URL's or
    secret's variable unset), not only after the run. A warning, as at the end: a CI job
    without the secret (a fork's pull request) still gates."""
    from gatekeeper.errors import GatekeeperError, one_line

    for target in getattr(args, "notify", None) or ():
        try:
            target.resolved_url()
            target.resolved_secret()
        except GatekeeperError as exc:
            print(f"gatekeeper: warning: notify {target.name}: {one_line(str(exc))}; the "
                  "verdict's card will not be posted", file=sys.stderr)


def finish(args: argparse.Namespace, follower: Follower, outcome: Outcome) -> int:
    from gatekeeper import gate
    from gatekeeper.cli.report import write_plot_reports
    from gatekeeper.report.color import wants_color
    from gatekeeper.report.text import quiet_lines

    follower.printer.close()
    # a store's new run (mlflow) is a run of its own: the reports read that one whole
    args.source = getattr(follower.gate.source, "followed", None) or args.source
    opts = report_options(args)
    card = _notify(args, outcome.verdict)  # `run --notify`: the job goes into the reports
    # files first: a closed stdout (`| head -1`) must not cost a report
    gate.write_files(outcome.verdict, opts)
    write_plot_reports(outcome.verdict, plot_options(args), None, args.source, run_overrides(args))
    gate.print_reports(outcome.verdict, opts)
    if getattr(args, "annotate", False):  # `watch` has --annotate, `run` does not
        from gatekeeper.annotate import annotate, report_link

        print(annotate(args.source, outcome.verdict, report_link(opts.json_path)))
    if args.quiet:
        print("\n".join(quiet_lines(outcome.verdict, wants_color(opts.color, sys.stdout))))
    if card is not None and card.targets:
        from gatekeeper.cli.notify import post

        post(card, [(args.source, outcome.verdict)], strict=False)
    return int(outcome.exit_code)


def _notify(args: argparse.Namespace, verdict: Verdict) -> NotifyOptions | None:
    """`run`'s notify options (None for `watch`), the verdict stamped with the CI job."""
    if not hasattr(args, "notify"):
        return None
    from gatekeeper.cli.args import notify_options
    from gatekeeper.notify.ci import JobInfo, stamp

    opts = notify_options(args)
    stamp(verdict, JobInfo(opts.job_name, opts.job_url))
    return opts
