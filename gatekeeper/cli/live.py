"""`gatekeeper watch SOURCE -p POLICY` and `gatekeeper run -p POLICY --source PATH -- CMD`.

`watch` follows a live run and exits at the first gating failure or when the run ends;
`run` also starts CMD in its own process group and stops the group when the gate fails.
Both write the same reports as `check`, with when and why the run was stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from gatekeeper.annotate import add_annotate_arg, annotate_from_args
from gatekeeper.cli import (
    EXTENSIONS,
    add_policy_args,
    add_report_args,
    add_run_args,
    report_options,
    run_overrides,
)
from gatekeeper.errors import UsageError

MILES_ENV = "MILES_CI_GATE_RECORD_DIR"


def _add_follow_args(p: argparse.ArgumentParser) -> None:
    from gatekeeper.live.loop import DEFAULT_INTERVAL

    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between polls (default {DEFAULT_INTERVAL:g})",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="treat the run as ended after this long without a new point (default: never)",
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="outside a terminal, print the progress line at most this often (default 30)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="follow a live run; exit 1 at the first gating failure")
    p.add_argument(
        "source", metavar="SOURCE", help="JSONL record file or run directory (may not exist yet)"
    )
    add_policy_args(p)
    add_run_args(p)
    _add_follow_args(p)
    add_report_args(p)
    add_annotate_arg(p)
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser(
        "run",
        help="start CMD, watch its metrics, stop its process group when the gate fails",
        usage="gatekeeper run -p POLICY (--source PATH | --miles) [options] -- CMD [ARGS...]",
    )
    add_policy_args(p)
    p.add_argument(
        "--source", metavar="PATH", help="where CMD writes its metrics (file or directory)"
    )
    p.add_argument(
        "--miles",
        action="store_true",
        help=f"set {MILES_ENV} for CMD to --source (a directory; default: a new temp "
        "directory) and watch the record files miles writes there",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="after SIGTERM, wait this long for the process group before SIGKILL (default 30)",
    )
    add_run_args(p)
    _add_follow_args(p)
    add_report_args(p)
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run"
    )
    p.set_defaults(func=cmd_run)


def _settings(args: argparse.Namespace, grace: float = 30.0) -> Any:
    from gatekeeper.live.loop import LoopSettings

    if args.interval <= 0:
        raise UsageError(f"--interval {args.interval:g}: must be > 0 seconds")
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise UsageError(f"--idle-timeout {args.idle_timeout:g}: must be > 0 seconds")
    if grace < 0:
        raise UsageError(f"--grace {grace:g}: must be >= 0 seconds")
    return LoopSettings(interval=args.interval, idle_timeout=args.idle_timeout, grace=grace)


def _follower(
    args: argparse.Namespace, source: str, grace: float, child: Any = None, *, cmd: bool = False
) -> Any:
    import time

    from gatekeeper import gate
    from gatekeeper.live.detect import open_follow_source
    from gatekeeper.live.gate import LiveGate
    from gatekeeper.live.loop import Follower
    from gatekeeper.live.progress import Printer
    from gatekeeper.policy.overrides import parse_override

    policies = gate.load(args.policy, [parse_override(o) for o in args.override])
    settings = _settings(args, grace)
    printer = Printer(sys.stdout, progress_every=args.progress_every, quiet=args.quiet)
    # opened before CMD starts: the runs already in a wandb folder are not the one to gate
    followed = open_follow_source(source, printer.say, for_command=cmd)
    live = LiveGate(followed, policies, run_overrides(args), started=time.time())
    return Follower(live, settings, printer, child)


def _report(args: argparse.Namespace, follower: Any, outcome: Any) -> int:
    from gatekeeper import gate
    from gatekeeper.report.text import summary_line

    follower.printer.close()
    gate.write_reports(outcome.verdict, report_options(args))
    from gatekeeper.commands.report import write_plot_reports

    write_plot_reports(outcome.verdict, args, None)
    annotate_from_args(args, outcome.verdict)
    if args.quiet:
        print(summary_line(outcome.verdict))
    return int(outcome.exit_code)


def cmd_watch(args: argparse.Namespace) -> int:
    follower = _follower(args, args.source, 0.0)
    try:
        outcome = follower.run()
    except KeyboardInterrupt:
        outcome = follower.interrupted()
    return _report(args, follower, outcome)


def _child_command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError(
            "run: no command given; write it after --, "
            "e.g. gatekeeper run -p P --source m.jsonl -- python train.py"
        )
    return cmd


def _record_source(args: argparse.Namespace) -> tuple[str, dict[str, str] | None]:
    """The path to watch, and the environment for CMD (None: gatekeeper's own)."""
    if not args.miles:
        if not args.source:
            raise UsageError("run: say where CMD writes its metrics: --source PATH (or --miles)")
        return args.source, None
    path = args.source or tempfile.mkdtemp(prefix="gatekeeper-miles-")
    if os.path.isfile(path):
        raise UsageError(f"run --miles: --source {path} is a file; miles writes into a directory")
    os.makedirs(path, exist_ok=True)
    print(f"gatekeeper: {MILES_ENV}={path}", flush=True)
    return path, {**os.environ, MILES_ENV: path}


def cmd_run(args: argparse.Namespace) -> int:
    from gatekeeper.live.process import ChildGroup, Forwarding

    cmd = _child_command(args)
    source, env = _record_source(args)
    args.source = source  # where the metrics are, for the HTML report's plots
    follower = _follower(args, source, args.grace, cmd=True)  # policy errors before CMD starts
    child = follower.child = ChildGroup(cmd, env)
    try:
        with Forwarding(child, on_forward=follower.on_forward):
            outcome = follower.run()
    finally:
        if not child.exited() or child.group_alive():
            child.stop(args.grace)  # gatekeeper itself failed: leave nothing running
    return _report(args, follower, outcome)


EXTENSIONS.append(register)
