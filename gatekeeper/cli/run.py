"""`gatekeeper run -p POLICY --source PATH -- CMD`: start CMD in its own process group,
watch the metrics it writes, and stop everything CMD started when the gate fails."""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gatekeeper.cli.args import (
    add_notify_args,
    add_policy_args,
    add_report_args,
    add_run_args,
    run_overrides,
    seconds,
)
from gatekeeper.cli.live import add_follow_args, finish, open_follower
from gatekeeper.errors import UsageError
from gatekeeper.live.loop import DEFAULT_GRACE

if TYPE_CHECKING:
    from gatekeeper.live.miles_config import MilesConfig

MILES_ENV = "MILES_CI_GATE_RECORD_DIR"


def register(sub: Any) -> None:
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
        "directory), watch the record files miles writes there, and read the run's config "
        "from the miles trainer CMD starts and the test file it runs into --source's run.json",
    )
    p.add_argument(
        "--grace",
        type=seconds(zero=True),
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="after SIGTERM to CMD's process group and every process it started (setsid "
        f"ones included), wait this long before SIGKILL (default {DEFAULT_GRACE:g})",
    )
    add_run_args(p)
    add_follow_args(p)
    add_report_args(p)
    add_notify_args(p)  # the verdict's chat card (gatekeeper/cli/notify.py)
    p.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run"
    )
    p.set_defaults(func=cmd_run)


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
    # absolute: CMD (or the trainer it starts) may write from another directory
    path = os.path.abspath(args.source or tempfile.mkdtemp(prefix="gatekeeper-miles-"))
    if os.path.isfile(path):
        raise UsageError(f"run --miles: --source {path} is a file; miles writes into a directory")
    os.makedirs(path, exist_ok=True)
    print(f"gatekeeper: {MILES_ENV}={path}", flush=True)
    return path, {**os.environ, MILES_ENV: path}


def _miles_config(
    args: argparse.Namespace, source: str, cmd: list[str], say: Callable[[str], None]
) -> MilesConfig:
    """What reads the run's config from what miles runs (gatekeeper/live/miles_config.py)."""
    from gatekeeper.live.miles_config import MilesConfig

    return MilesConfig(source, cmd, run_overrides(args).config, say)


def cmd_run(args: argparse.Namespace) -> int:
    from gatekeeper.live.process import ChildGroup, Forwarding

    cmd = _child_command(args)
    source, env = _record_source(args)
    args.source = source  # where the metrics are, for the HTML report's plots
    follower = open_follower(args, source, args.grace, cmd=True)  # policy errors before CMD starts
    miles = _miles_config(args, source, cmd, follower.printer.say) if args.miles else None
    with Forwarding(on_forward=follower.on_forward) as forwarding:  # before CMD starts
        child = follower.child = forwarding.attach(ChildGroup(cmd, env))
        if miles is not None:
            follower.hold = functools.partial(miles.hold, child)
        try:
            outcome = follower.run()
        finally:
            if not child.exited() or child.alive():
                child.stop(args.grace)  # gatekeeper itself failed: leave nothing running
    return finish(args, follower, outcome)
