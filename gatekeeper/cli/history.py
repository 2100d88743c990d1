"""`gatekeeper history record|show|mark-untrusted|import|migrate` (`check --history URL
[--record]` shares its options, in cli/args.py).

The store URL comes from `--history` or the GATEKEEPER_HISTORY environment variable (so a
PostgreSQL password can stay in a CI secret); it is shown with the password redacted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gatekeeper.cli.args import (
    add_history_args,
    add_policy_args,
    add_report_args,
    add_run_args,
    history_options,
    policy_options,
    print_summary,
    report_options,
    run_overrides,
    store_url,
    whole,
)
from gatekeeper.errors import UsageError


def cmd_record(args: argparse.Namespace) -> int:
    """Judge and record; exit 0 once recorded (the trust decision is printed)."""
    from gatekeeper import gate

    policy = policy_options(args)
    policies = gate.load(list(policy.paths), list(policy.overrides))
    opts = history_options(args, record=True)
    verdict = gate.check(args.source, policies, run_overrides(args), history=opts)
    gate.write_reports(verdict, report_options(args))
    print_summary(verdict, quiet=False)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from gatekeeper.history import open_store

    url = store_url(args, required=True)
    assert url is not None
    with open_store(url) as store:
        runs = store.runs(series=args.series, limit=args.limit)
        print(f"{store.display}: {len(runs)} run(s), newest first")
        for r in runs:
            trust = "trusted" if r.trusted else "untrusted"
            print(
                f"  {r.created_at}  {r.run_id}  {trust:9}  commit {r.commit or '-'}  "
                f"{r.values} value(s)  series {r.series}"
            )
    return 0


def cmd_mark_untrusted(args: argparse.Namespace) -> int:
    from gatekeeper.history import open_store

    if (args.run_id is None) == (args.commit is None):
        raise UsageError("history mark-untrusted takes exactly one of --run-id or --commit")
    url = store_url(args, required=True)
    assert url is not None
    with open_store(url) as store:
        n = store.mark_untrusted(run_id=args.run_id, commit=args.commit)
    what = f"run {args.run_id}" if args.run_id else f"commit {args.commit}"
    print(f"{what}: {n} run(s) marked untrusted (rows kept, no longer in any baseline)")
    if n == 0:
        print(f"gatekeeper: warning: no recorded run matches {what}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Copy a miles metric-history database into the gatekeeper store."""
    from gatekeeper.history import open_store
    from gatekeeper.history.miles import import_runs

    url = store_url(args, required=True)
    assert url is not None
    store = open_store(url)
    with store:
        got = import_runs(store, args.miles)
        print(
            f"{store.display}: imported {got.runs} miles run(s) ({got.trusted} trusted, "
            f"{got.values} value(s)); {got.skipped} already present"
        )
        if got.revoked:
            print(
                f"  trust revoked in miles since the last import: {len(got.revoked)} run(s) "
                f"now untrusted here too: {_ids(got.revoked)}"
            )
        if got.kept_untrusted:
            print(
                f"  untrusted here, still trusted in miles: {len(got.kept_untrusted)} run(s) "
                f"kept untrusted (gatekeeper never re-trusts; revoke them in miles too if the "
                f"reason holds there): {_ids(got.kept_untrusted)}"
            )
    return 0


def _ids(run_ids: tuple[str, ...], shown: int = 5) -> str:
    more = len(run_ids) - shown
    return ", ".join(run_ids[:shown]) + (f" (+{more} more)" if more > 0 else "")


def cmd_migrate(args: argparse.Namespace) -> int:
    """Convert a store of gatekeeper's first layout to the gk_* tables."""
    from gatekeeper.history import open_store

    url = store_url(args, required=True)
    assert url is not None
    store = open_store(url, migrate=True)
    with store:
        n = store.migrated
        print(
            f"{store.display}: converted {n} run(s) to the gk_* tables "
            "(old tables kept as gk_legacy_runs, gk_legacy_metric_values)"
            if n
            else f"{store.display}: nothing to convert (no old-layout tables)"
        )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("history", help="baseline store of history (drift) rules")
    hsub = p.add_subparsers(dest="history_command", required=True, parser_class=type(p))

    r = hsub.add_parser("record", help="judge a finished run and record it in the store")
    r.add_argument("source", metavar="SOURCE", help="JSONL record file or run directory")
    add_policy_args(r)
    add_run_args(r)
    add_history_args(r, required=True)
    add_report_args(r)
    r.set_defaults(func=cmd_record)

    s = hsub.add_parser("show", help="list recorded runs, newest first")
    s.add_argument("--history", metavar="URL", help="store (default: $GATEKEEPER_HISTORY)")
    s.add_argument("--series", help="only runs of this series (canonical JSON as shown)")
    s.add_argument("--limit", type=whole(1, 1_000_000), default=50,
                   help="at most this many runs (default 50)")
    s.set_defaults(func=cmd_show)

    m = hsub.add_parser("mark-untrusted", help="revoke trust for a run or a commit (rows stay)")
    m.add_argument("--history", metavar="URL", help="store (default: $GATEKEEPER_HISTORY)")
    m.add_argument("--run-id", help="the run id it was recorded under")
    m.add_argument("--commit", help="every run recorded with this commit")
    m.set_defaults(func=cmd_mark_untrusted)

    i = hsub.add_parser(
        "import",
        help="copy a miles metric-history database (SQLite or PostgreSQL/Neon) in; run again "
        "to add new runs and sync trust miles revoked since",
    )
    i.add_argument("miles", metavar="MILES_URL", help="the miles store: a SQLite path or postgresql://")
    i.add_argument("--history", metavar="URL", help="target store (default: $GATEKEEPER_HISTORY)")
    i.set_defaults(func=cmd_import)

    g = hsub.add_parser("migrate", help="convert a store of gatekeeper's old table layout")
    g.add_argument("--history", metavar="URL", help="store (default: $GATEKEEPER_HISTORY)")
    g.set_defaults(func=cmd_migrate)

