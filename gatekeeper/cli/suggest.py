"""`gatekeeper suggest`: derive a policy of bands from trusted runs.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli.args import add_tuning_arg, bounded
from gatekeeper.errors import UsageError


def cmd_suggest(args: argparse.Namespace) -> int:
    from gatekeeper.sources import open_source
    from gatekeeper.toolkit.suggest import Settings, predict_factor, suggest, sureness
    from gatekeeper.toolkit.suggest_check import leave_one_out, write_verified

    if len(args.runs) < 2:
        raise UsageError("suggest: give at least 2 trusted runs (bands from one run are its noise)")
    settings = Settings(
        quantiles=_quantiles(args.quantiles), frac=args.margin, level=args.level,
        noise=args.noise, include_timing=tuple(args.include_timing or ()),
    )  # fmt: skip
    runs = [open_source(path).read() for path in args.runs]
    sug = suggest(runs, settings)
    leave_one_out(runs, sug, settings)
    write_verified(sug, runs, args.output, args.name, args.runs, settings)
    k = predict_factor(len(runs), sug.rule_level)
    print(
        f"wrote {args.output}: {len(sug.bands)} rules from {len(runs)} runs (a healthy run "
        f"passes all with p >= {settings.level:g}: each a {sug.rule_level:.4g} prediction band, "
        f"+- {k:.3g} std across runs)"
    )
    for band in sug.bands:
        print(f"  {band.rule_id}: {sureness(band)}")
    shown = {f"{b.rule_id}:" for b in sug.bands}  # their line above says it already
    for line in sug.loo:
        if line.split(" ", 1)[0] not in shown:
            print(f"  leave-one-out: {line}")
    for line in sug.noisy:
        print(f"  too noisy to band: {line}")
    for line in sug.unusable:
        print(f"  not banded: {line}")
    if sug.timing:
        print(f"  timing, left out (--include-timing GLOB to band): {', '.join(sug.timing)}")
    return 0


def _quantiles(text: str) -> tuple[float, float]:
    lo, sep, hi = text.partition(",")
    try:
        quantiles = (float(lo), float(hi))
    except ValueError:
        raise UsageError(f"--quantiles {text!r}: expected LO,HI like 0.005,0.995") from None
    if not (sep and 0 <= quantiles[0] < quantiles[1] <= 1):
        raise UsageError(f"--quantiles {text!r}: need 0 <= LO < HI <= 1")
    return quantiles


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
    p.add_argument(
        "--include-timing",
        action="append",
        metavar="GLOB",
        help="band the wall-clock/throughput/progress metrics matching GLOB too, e.g. "
        "'*' or 'perf/tokens_per_sec' (repeatable; default: left out, listed)",
    )
    add_tuning_arg(
        p, "--margin", 0.25, "FRAC", "widen every-point bands by this share of their width",
        bounded(0, 100),
    )
    add_tuning_arg(
        p, "--level", 0.95, "P", "one more healthy run passes every band with probability P",
        bounded(0, 1, above=True, below=True, like=", like 0.99"),
    )
    add_tuning_arg(
        p, "--noise", 10.0, "X", "too noisy when a band is wider than X times the median",
        bounded(0, 1e6, above=True),
    )
    p.set_defaults(func=cmd_suggest)
