"""`gatekeeper suggest`: derive a policy of bands from trusted runs.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli.args import add_tuning_arg
from gatekeeper.errors import UsageError


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


def register(sub: Any) -> None:
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
    add_tuning_arg(
        p, "--margin", 0.25, "FRAC", "widen every-point bands by this share of their width"
    )
    add_tuning_arg(p, "--sigmas", 3.0, "K", "widen across-run bands by K robust sigmas")
    add_tuning_arg(
        p, "--noise", 10.0, "X", "too noisy when a band is wider than X times the median"
    )
    p.set_defaults(func=cmd_suggest)
