"""`gatekeeper lint POLICY...`: policy problems that load but mislead; exit 1 if any.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gatekeeper.cli.args import add_output_format


def cmd_lint(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.sources import open_source
    from gatekeeper.toolkit.lint import lint
    from gatekeeper.toolkit.lintcodes import narrow, parse_codes

    select = parse_codes(args.select, "--select")
    ignore = parse_codes(args.ignore, "--ignore")
    policies = load_policies(args.paths)
    runs = [open_source(r).read() for r in args.runs or []]
    starts = [r.source for p in policies for r in p.rules]
    findings, silenced = narrow(lint(policies, runs), starts, _texts(starts), select, ignore)
    rules = len(starts)
    against = f" against {len(runs)} example runs" if runs else ""
    noqa = f", {silenced} suppressed inline" if silenced else ""
    summary = (
        f"{'problems' if findings else 'ok'}: {len(findings)} finding(s) in {rules} rules"
        f"{against}{noqa}"
    )
    _write(args.output_format, findings, summary, rules, silenced)
    return 1 if findings else 0


def _texts(starts: list[str]) -> dict[str, str]:
    """Each policy file that declares a rule, as text (for its noqa comments)."""
    from gatekeeper.toolkit.output import split_source

    files = {split_source(s)[0] for s in starts}
    out = {}
    for f in sorted(files):
        with open(f, encoding="utf-8", errors="replace") as fh:
            out[f] = fh.read()
    return out


def _write(fmt: str, findings: list[Any], summary: str, rules: int, silenced: int) -> None:
    from gatekeeper.toolkit.output import Item, split_source, write_github, write_json

    if fmt == "text":
        for f in findings:
            print(f)
        print(summary)
        return
    items = [
        Item("error", f"gatekeeper lint {f.code} {f.kind}", f"{f.rule}: {f.message}",
             *split_source(f.source), code=f.code)
        for f in findings
    ]
    if fmt == "github":
        write_github(items, summary, sys.stdout)
    else:
        counts = {"ok": not findings, "findings": len(findings), "rules": rules}
        write_json(items, {"command": "lint", **counts, "suppressed": silenced}, sys.stdout)


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
    p.add_argument(
        "--select", metavar="CODES", help="report only these rule codes or prefixes (GK001,GK00)"
    )
    p.add_argument("--ignore", metavar="CODES", help="never report these rule codes or prefixes")
    add_output_format(p)
    p.set_defaults(func=cmd_lint)
