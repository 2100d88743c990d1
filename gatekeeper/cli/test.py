"""`gatekeeper test FILE...`: run policy unit tests (*.test.yaml); exit 1 if one fails.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gatekeeper.errors import UsageError


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
    from gatekeeper.toolkit.policytest import run_file
    from gatekeeper.toolkit.results import render, write_junit

    results = [r for f in test_files(args.paths) for r in run_file(f)]
    render(results, sys.stdout)
    if args.junit_path:
        write_junit(results, args.junit_path)
    return 0 if all(r.passed for r in results) else 1


def register(sub: Any) -> None:
    p = sub.add_parser("test", help="run policy unit tests (*.test.yaml): expected status per rule")
    p.add_argument(
        "paths", nargs="+", metavar="FILE", help="test files or directories of *.test.yaml"
    )
    p.add_argument("--junit", dest="junit_path", metavar="FILE", help="write JUnit XML")
    p.set_defaults(func=cmd_test)
