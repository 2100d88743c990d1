"""`gatekeeper export`: export a policy to another evaluator (Prometheus
alerting rules and their promtool tests).

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli.args import seconds
from gatekeeper.cli.test import test_files
from gatekeeper.errors import UsageError


def cmd_export(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.report.files import write_atomic
    from gatekeeper.toolkit.export_prom import dump, render
    from gatekeeper.toolkit.promql import NotExportable, load_naming, translate
    from gatekeeper.toolkit.promtest import generate, test_file
    from gatekeeper.toolkit.testfile import load_tests

    if bool(args.tests_from) != bool(args.tests_out):
        raise UsageError("export: --tests-from TEST and --tests-out FILE go together")
    naming = load_naming(args.mapping, args.selector or "")
    translation = translate(load_policies(args.policy), naming)
    write_atomic(args.output, render(translation, naming, args.interval).encode())
    print(f"wrote {args.output}: {len(translation.exported)} alerting rules")
    for rule, why in translation.skipped:
        print(f"  not exportable: {rule.key} ({rule.source}): {why}")
    if args.tests_from:
        tests: list[Any] = []
        for path in test_files(args.tests_from):
            try:
                generated = generate(load_tests(path), translation, naming, args.interval)
            except NotExportable as exc:
                raise UsageError(f"export --tests-from: {exc}") from None
            tests += generated.tests
            for why in generated.left_out:
                print(f"  left out of the promtool tests: {why}")
        data = test_file(tests, args.output, args.tests_out, args.interval)
        write_atomic(args.tests_out, dump(data).encode())
        print(f"wrote {args.tests_out}: {len(tests)} promtool test groups")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="export a policy to another evaluator (prometheus)")
    p.add_argument("target", choices=("prometheus",), help="what to export to")
    p.add_argument("policy", nargs="+", metavar="POLICY", help="policy files or directories")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="alerting-rule file to write"
    )
    p.add_argument(
        "--interval",
        type=seconds(),
        default=60.0,
        metavar="SECONDS",
        help="rule evaluation interval = one point per interval, for `for: N` (default 60)",
    )
    p.add_argument(
        "--mapping",
        metavar="FILE",
        help="metric-name mapping (default: gatekeeper_metric_value{run,metric})",
    )
    p.add_argument(
        "--selector",
        metavar="MATCHERS",
        help='extra label matchers for every series, e.g. job="rl"',
    )
    p.add_argument(
        "--tests-from",
        action="append",
        metavar="TEST",
        help="gatekeeper test files to turn into promtool tests",
    )
    p.add_argument("--tests-out", metavar="FILE", help="where to write the promtool test file")
    p.set_defaults(func=cmd_export)
