"""`gatekeeper notify REPORT... --notify KIND:URL_ENV`: one chat card for a CI run, from
the JSON reports its gate jobs wrote; and the card `check`/`run --notify` post for their
one job. Both go through gatekeeper.notify.ci (the daemon's grouping and delivery)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gatekeeper.cli.args import NotifyOptions, add_notify_args, notify_options
from gatekeeper.errors import UsageError

if TYPE_CHECKING:
    from gatekeeper.verdict import Verdict


def register(sub: Any) -> None:
    p = sub.add_parser(
        "notify",
        help="post one chat card for a CI run's gate jobs, from their JSON reports",
        usage="gatekeeper notify REPORT [REPORT...] --notify KIND:URL_ENV[:SECRET_ENV]",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT",
                   help="a JSON report a gate job wrote (check|run --json FILE)")
    add_notify_args(p, job=False)
    p.set_defaults(func=cmd_notify)


def cmd_notify(args: argparse.Namespace) -> int:
    from gatekeeper.report.json_report import read

    opts = notify_options(args)
    if not opts.targets:
        raise UsageError("notify: say where to post: --notify KIND:URL_ENV, e.g. "
                         "--notify lark:LARK_WEBHOOK_URL")
    verdicts = [(path, read(path)) for path in args.reports]
    post(opts, verdicts, strict=True)
    return 0


def post(opts: NotifyOptions, verdicts: list[tuple[str, Verdict]], *, strict: bool) -> None:
    """Post the card to every target and say what happened. A post that fails is exit 2
    for `notify` (`strict`); for `check`/`run` a warning on stderr: the gate's verdict
    stays the exit code."""
    from gatekeeper.errors import GatekeeperError, one_line
    from gatekeeper.notify.ci import NotDelivered, alerts_of, deliver

    alerts = alerts_of(verdicts, opts.statuses)
    jobs = len({a["run_key"] for a in alerts})
    for target in opts.targets:
        try:
            got = deliver(target, alerts)
        except GatekeeperError as exc:  # the URL's variable unset, say
            if strict:
                raise
            print(f"gatekeeper: warning: notify {target.name}: {one_line(str(exc))}",
                  file=sys.stderr)
            continue
        if got.outcome == "nothing":
            print(f"gatekeeper: notify {target.name}: nothing to post "
                  f"({len(verdicts)} report(s), no rule {'/'.join(sorted(opts.statuses))})")
        elif got.outcome == "sent":
            print(f"gatekeeper: notify {target.name}: posted 1 card: {got.alerts} alert(s) "
                  f"of {jobs} of {len(verdicts)} job(s) in {got.groups} group(s)")
        elif strict:
            raise NotDelivered(f"notify {target.name}: card {got.outcome}: {got.detail}")
        else:
            print(f"gatekeeper: warning: notify {target.name}: card {got.outcome}: "
                  f"{got.detail}", file=sys.stderr)
