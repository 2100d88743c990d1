"""`gatekeeper import-recipe`: a recipe doc's 'What to expect' table as a policy.

Turns argparse into plain values here and calls gatekeeper/toolkit/ (exit codes as
everywhere: 0 ok, 1 tests failed / lint found problems, 2 bad input)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from gatekeeper.cli.args import add_tuning_arg, bounded, whole
from gatekeeper.errors import PolicyError, UsageError


def cmd_import_recipe(args: argparse.Namespace) -> int:
    from gatekeeper.policy.loader import load_policy
    from gatekeeper.report.files import write_atomic
    from gatekeeper.toolkit.recipe import RecipeDocError, import_recipe, render

    try:
        with open(args.doc, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"import-recipe: cannot read {args.doc}: {exc}") from None
    match: dict[str, str] = {}
    for item in args.match_config or []:
        key, eq, value = item.partition("=")
        if not (eq and key):
            raise UsageError(f"--match-config {item!r}: expected KEY=VALUE")
        match[key] = value
    try:
        recipe = import_recipe(text, args.about, args.eval_every)
    except RecipeDocError as exc:
        raise UsageError(f"import-recipe: {args.doc}: {exc}") from None
    if not recipe.rules:  # a policy of no rules does not load: say why, write nothing
        why = "; ".join(f"line {n}: {reason}" for n, _row, reason in recipe.not_read[:3])
        raise UsageError(
            f"import-recipe: {args.doc}: no row of the table reads as a rule "
            f"({why or 'no rows'})"
        )
    stem = os.path.basename(args.doc).rsplit(".", 1)[0]
    name = args.name or "recipe-" + "".join(c if c.isalnum() or c in ".-" else "-" for c in stem)
    write_atomic(args.output, render(recipe, args.doc, name, match).encode())
    try:
        load_policy(args.output)
    except PolicyError as exc:  # what we write must load: a failure is our bug (exit 70)
        raise RuntimeError(f"import-recipe wrote a policy that does not load: {exc}") from exc
    print(f"wrote {args.output}: {len(recipe.rules)} rules from {args.doc}")
    for line, _row, why in recipe.not_read:
        print(f"  not interpreted: {args.doc}:{line}: {why}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "import-recipe",
        help="read a recipe doc's 'What to expect' table (or healthy-run list) into a policy",
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
    add_tuning_arg(p, "--about", 0.2, "REL", "relative tolerance 'about'/'~' means",
                   bounded(0, 1, above=True, below=True, like=" (a relative tolerance)"))
    p.add_argument(
        "--eval-every",
        type=whole(1, 1 << 40),
        metavar="ROLLOUTS",
        help="rollouts between evaluations, to place 'eval@N' on eval/step (miles logs the "
        "rollout id there); without it an 'eval@N' is listed as not interpreted",
    )
    p.set_defaults(func=cmd_import_recipe)
