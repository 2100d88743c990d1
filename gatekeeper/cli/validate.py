"""`gatekeeper validate POLICY...`: load policies and report problems (exit 2 if any)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli.args import add_output_format
from gatekeeper.errors import one_line


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="load policies and report problems (exit 2 if any)")
    p.add_argument("paths", nargs="+", metavar="POLICY")
    p.add_argument("-v", "--verbose", action="store_true", help="list every rule")
    add_output_format(p)
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from gatekeeper.errors import PolicyError
    from gatekeeper.policy.loader import load_policies

    if args.output_format != "text":
        try:
            policies = load_policies(args.paths)
        except PolicyError as exc:  # reported in the format asked for, still exit 2
            return _structured(args.output_format, [], exc)
        return _structured(args.output_format, policies, None)
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


def _structured(fmt: str, policies: list[Any], exc: Exception | None) -> int:
    """`--output-format json|github`: the policies and rule counts, or the one error
    (with its file and line) as an item; exit 2 on the error as in text."""
    import sys

    from gatekeeper.toolkit.output import Item, where_of, write_github, write_json

    items = []
    if exc is not None:
        text = one_line(str(exc))
        items.append(Item("error", "gatekeeper: invalid policy", text, *where_of(exc)))
    rules = sum(len(p.rules) for p in policies)
    summary = (
        f"invalid: {one_line(str(exc))}" if exc is not None
        else f"ok: {len(policies)} policies, {rules} rules"
    )
    if fmt == "github":
        write_github(items, summary, sys.stdout)
    else:
        listed = [
            {
                "file": p.file,
                "policy": p.name,
                "mode": p.mode.value,
                "rules": [r.id for r in p.rules],
            }
            for p in policies
        ]
        doc = {"command": "validate", "ok": exc is None, "policies": listed, "rules": rules}
        write_json(items, doc, sys.stdout)
    return 2 if exc is not None else 0
