"""`gatekeeper watch SOURCE -p POLICY`: follow a live run; exit 1 at the first gating
failure, or with the final verdict when the run ends. Writes the same reports as `check`,
with when and why the run was stopped."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli.args import add_annotate_arg, add_policy_args, add_report_args, add_run_args
from gatekeeper.cli.live import add_follow_args, finish, open_follower


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="follow a live run; exit 1 at the first gating failure")
    p.add_argument(
        "source", metavar="SOURCE", help="JSONL record file or run directory (may not exist yet)"
    )
    add_policy_args(p)
    add_run_args(p)
    add_follow_args(p)
    add_report_args(p)
    add_annotate_arg(p)
    p.set_defaults(func=cmd_watch)


def cmd_watch(args: argparse.Namespace) -> int:
    follower = open_follower(args, args.source, 0.0)
    try:
        outcome = follower.run()
    except KeyboardInterrupt:
        outcome = follower.interrupted()
    return finish(args, follower, outcome)
