"""`gatekeeper test FILE...`: run policy unit tests (*.test.yaml); exit 1 if one fails.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gatekeeper.cli.args import add_output_format
from gatekeeper.errors import UsageError

NOTHING_RAN = 5  # as pytest's "no tests collected" and check's "nothing judged"


def test_files(paths: list[str]) -> list[str]:
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            out += sorted(
                os.path.join(root, n)
                for root, _, names in os.walk(path)
                for n in names
                if n.endswith((".test.yaml", ".test.yml"))
            )
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise UsageError(f"test: no such file or directory {path}")
    if not out:
        raise UsageError(f"test: no *.test.yaml files under {', '.join(paths)}")
    return out


def cmd_test(args: argparse.Namespace) -> int:
    from gatekeeper.toolkit.kexpr import compile_k
    from gatekeeper.toolkit.policytest import CaseResult, run_chosen
    from gatekeeper.toolkit.results import render_as, write_junit

    keep = compile_k(args.k) if args.k is not None else None
    results: list[CaseResult] = []
    deselected = 0
    for f in test_files(args.paths):
        ran, left = run_chosen(f, keep)
        results += ran
        deselected += left
    if not results:  # as pytest: nothing ran is not a pass (exit 5, "no tests ran")
        print(f"no policy test matches -k {args.k!r} ({deselected} deselected)", file=sys.stderr)
        return NOTHING_RAN
    render_as(args.output_format, results, sys.stdout, args.verbose, deselected)
    if args.junit_path:
        write_junit(results, args.junit_path)
    return 0 if all(r.passed for r in results) else 1


def register(sub: Any) -> None:
    p = sub.add_parser("test", help="run policy unit tests (*.test.yaml): expected status per rule")
    p.add_argument(
        "paths", nargs="+", metavar="FILE", help="test files or directories of *.test.yaml"
    )
    p.add_argument("--junit", dest="junit_path", metavar="FILE", help="write JUnit XML")
    p.add_argument(
        "-k",
        metavar="EXPR",
        help="run only the cases whose name (or file name) contains these words, joined by "
        "and, or, not: -k 'clip and not warn'",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list every case run")
    add_output_format(p)
    p.set_defaults(func=cmd_test)
