"""The policy toolkit commands: `test`, `lint`, `suggest`, `import-recipe`, `export`.

Each turns argparse into plain values here and calls gatekeeper/toolkit/. Exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gatekeeper.cli import EXTENSIONS
from gatekeeper.errors import UsageError


def _test_files(paths: list[str]) -> list[str]:
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

    results = [r for f in _test_files(args.paths) for r in run_file(f)]
    render(results, sys.stdout)
    if args.junit_path:
        write_junit(results, args.junit_path)
    return 0 if all(r.passed for r in results) else 1


def _register_test(sub: Any) -> None:
    p = sub.add_parser("test", help="run policy unit tests (*.test.yaml): expected status per rule")
    p.add_argument(
        "paths", nargs="+", metavar="FILE", help="test files or directories of *.test.yaml"
    )
    p.add_argument("--junit", dest="junit_path", metavar="FILE", help="write JUnit XML")
    p.set_defaults(func=cmd_test)


EXTENSIONS.append(_register_test)


def cmd_export(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.report.files import write_atomic
    from gatekeeper.toolkit.export_prom import dump, render
    from gatekeeper.toolkit.promql import NotExportable, load_naming, translate
    from gatekeeper.toolkit.promtest import generate, test_file
    from gatekeeper.toolkit.testfile import load_tests

    if args.interval <= 0:
        raise UsageError(f"--interval {args.interval:g}: must be > 0 seconds")
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
        for path in _test_files(args.tests_from):
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


def _register_export(sub: Any) -> None:
    p = sub.add_parser("export", help="export a policy to another evaluator (prometheus)")
    p.add_argument("target", choices=("prometheus",), help="what to export to")
    p.add_argument("policy", nargs="+", metavar="POLICY", help="policy files or directories")
    p.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="alerting-rule file to write"
    )
    p.add_argument(
        "--interval",
        type=float,
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


EXTENSIONS.append(_register_export)


def cmd_suggest(args: argparse.Namespace) -> int:
    from gatekeeper.sources import open_source
    from gatekeeper.toolkit.suggest import Settings, suggest

    if len(args.runs) < 2:
        raise UsageError("suggest: give at least 2 trusted runs (bands from one run are its noise)")
    lo, sep, hi = args.quantiles.partition(",")
    try:
        quantiles = (float(lo), float(hi))
    except ValueError:
        raise UsageError(
            f"--quantiles {args.quantiles!r}: expected LO,HI like 0.005,0.995"
        ) from None
    if not (sep and 0 <= quantiles[0] < quantiles[1] <= 1):
        raise UsageError(f"--quantiles {args.quantiles!r}: need 0 <= LO < HI <= 1")
    settings = Settings(quantiles=quantiles, frac=args.margin, k=args.sigmas, noise=args.noise)
    runs = [open_source(path).read() for path in args.runs]
    sug = suggest(runs, settings)
    _write_verified(sug, runs, args, settings)
    print(f"wrote {args.output}: {len(sug.bands)} rules from {len(runs)} runs")
    for line in sug.noisy:
        print(f"  too noisy to band: {line}")
    for line in sug.unusable:
        print(f"  not banded: {line}")
    return 0


def _write_verified(sug: Any, runs: list[Any], args: argparse.Namespace, settings: Any) -> None:
    """Write the policy, judge every input run with it, drop any rule one of them does not
    pass and write again: the promise is checked, not assumed. Each round drops at least
    one rule, so this ends."""
    from gatekeeper.engine import evaluate
    from gatekeeper.policy.loader import load_policy
    from gatekeeper.report.files import write_atomic
    from gatekeeper.toolkit.suggest import render
    from gatekeeper.verdict import Status

    while True:
        write_atomic(args.output, render(sug, args.name, args.runs, settings).encode())
        if not sug.bands:
            return
        policy = load_policy(args.output)
        failing = {
            (r.rule, run.name, r.message)
            for run in runs
            for r in evaluate([policy], run).results
            if r.status is not Status.PASS
        }
        if not failing:
            return
        dropped = {rule for rule, _, _ in failing}
        sug.bands = [b for b in sug.bands if b.rule_id not in dropped]
        sug.unusable += [
            f"{rule}: dropped, {run} does not pass it ({msg})" for rule, run, msg in sorted(failing)
        ]


def _register_suggest(sub: Any) -> None:
    p = sub.add_parser("suggest", help="derive a policy of bands from trusted runs")
    p.add_argument("runs", nargs="+", metavar="RUN", help="trusted runs (any source check reads)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="policy file to write")
    p.add_argument("--name", default="suggested", help="policy name (default: suggested)")
    p.add_argument(
        "--quantiles",
        default="0.005,0.995",
        metavar="LO,HI",
        help="pooled quantiles an every-point band starts from (default 0.005,0.995)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.25,
        metavar="FRAC",
        help="widen every-point bands by this share of their width (default 0.25)",
    )
    p.add_argument(
        "--sigmas",
        type=float,
        default=3.0,
        metavar="K",
        help="widen across-run bands by K robust sigmas (default 3)",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=10.0,
        metavar="X",
        help="too noisy when a band is wider than X times the median (default 10)",
    )
    p.set_defaults(func=cmd_suggest)


EXTENSIONS.append(_register_suggest)


def cmd_import_recipe(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policy
    from gatekeeper.report.files import write_atomic
    from gatekeeper.toolkit.recipe import RecipeDocError, import_recipe, render

    try:
        with open(args.doc, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"import-recipe: cannot read {args.doc}: {exc}") from None
    if not 0 < args.about < 1:
        raise UsageError(f"--about {args.about:g}: a relative tolerance between 0 and 1")
    match: dict[str, str] = {}
    for item in args.match_config or []:
        key, eq, value = item.partition("=")
        if not (eq and key):
            raise UsageError(f"--match-config {item!r}: expected KEY=VALUE")
        match[key] = value
    try:
        recipe = import_recipe(text, args.about)
    except RecipeDocError as exc:
        raise UsageError(f"import-recipe: {args.doc}: {exc}") from None
    stem = os.path.basename(args.doc).rsplit(".", 1)[0]
    name = args.name or "recipe-" + "".join(c if c.isalnum() or c in ".-" else "-" for c in stem)
    write_atomic(args.output, render(recipe, args.doc, name, match).encode())
    load_policy(args.output)  # what we write must load; a failure here is a bug, not bad input
    print(f"wrote {args.output}: {len(recipe.rules)} rules from {args.doc}")
    for line, _row, why in recipe.not_read:
        print(f"  not interpreted: {args.doc}:{line}: {why}")
    return 0


def _register_import(sub: Any) -> None:
    p = sub.add_parser(
        "import-recipe", help="read a recipe doc's 'What to expect' table into a policy"
    )
    p.add_argument("doc", metavar="DOC.md", help="the recipe's Markdown")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="policy file to write")
    p.add_argument("--name", help="policy name (default: recipe-<doc file name>)")
    p.add_argument(
        "--match-config",
        action="append",
        metavar="KEY=VALUE",
        help="apply the policy only to runs with this config value (repeatable)",
    )
    p.add_argument(
        "--about",
        type=float,
        default=0.2,
        metavar="REL",
        help="relative tolerance 'about'/'~' means (default 0.2)",
    )
    p.set_defaults(func=cmd_import_recipe)


EXTENSIONS.append(_register_import)


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


def _register_lint(sub: Any) -> None:
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


EXTENSIONS.append(_register_lint)
