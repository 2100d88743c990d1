"""`gatekeeper lint POLICY...`: policy problems that load but mislead; exit 1 if any.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_lint(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.sources import open_source
    from gatekeeper.toolkit.lint import lint

    policies = load_policies(args.paths)
    runs = [open_source(r).read() for r in args.runs or []]
    findings = lint(policies, runs)
    for f in findings:
        print(f)
    rules = sum(len(p.rules) for p in policies)
    against = f" against {len(runs)} example runs" if runs else ""
    print(
        f"{'problems' if findings else 'ok'}: {len(findings)} finding(s) in {rules} rules{against}"
    )
    return 1 if findings else 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lint", help="find rules that cannot work: never fail/pass, shadowed, off-scale"
    )
    p.add_argument("paths", nargs="+", metavar="POLICY", help="policy files or directories")
    p.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN",
        help="example runs: flag thresholds far outside what they logged, warn rules on "
        "metrics they lack",
    )
    p.set_defaults(func=cmd_lint)
