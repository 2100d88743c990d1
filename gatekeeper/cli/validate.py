"""`gatekeeper validate POLICY...`: load policies and report problems (exit 2 if any)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.errors import one_line


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="load policies and report problems (exit 2 if any)")
    p.add_argument("paths", nargs="+", metavar="POLICY")
    p.add_argument("-v", "--verbose", action="store_true", help="list every rule")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies

    policies = load_policies(args.paths)
    for p in policies:
        base = f" (extends {p.extends})" if p.extends else ""
        # one_line: a metric name in a policy may hold a newline (a workflow command)
        head = f"{p.file}: policy {p.name}, {len(p.rules)} rules, mode {p.mode.value}{base}"
        print(one_line(head))
        if args.verbose:
            for r in p.rules:
                conditions = " and ".join(c.describe() for c in r.conditions)
                when = f" when {conditions}" if r.conditions else ""
                # an override's effect and reason: a switched-off rule must not read as live
                off = " off: true" if r.off else ""
                why = f" (override: {r.override})" if r.override else ""
                print("  " + one_line(
                    f"{r.id}: {r.metric} steps={r.steps.describe()} {r.describe_expected()}"
                    f" [{r.severity.value}]{off}{why}{when} ({r.source})"
                ))
    print(f"ok: {len(policies)} policies, {sum(len(p.rules) for p in policies)} rules")
    return 0
