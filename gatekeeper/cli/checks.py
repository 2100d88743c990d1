"""`gatekeeper checks [KIND]`: list the check kinds policies can use, or one kind's page."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.errors import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("checks", help="list the check kinds policies can use, or show one")
    p.add_argument(
        "kind", nargs="?", metavar="KIND", help="print this kind's whole doc and an example"
    )
    p.set_defaults(func=cmd_checks)


def cmd_checks(args: argparse.Namespace) -> int:
    import shutil

    from gatekeeper.checks import registry
    from gatekeeper.toolkit.checkdoc import doc_of, first_sentence, page

    kinds = registry()
    terminal = shutil.get_terminal_size().columns  # COLUMNS, the terminal, else 80
    if args.kind is not None:
        if args.kind not in kinds:
            raise UsageError(_unknown(args.kind, sorted(kinds)))
        print(page(args.kind, kinds[args.kind], max(40, min(terminal, 100))), end="")
        return 0
    import textwrap

    width = max(map(len, kinds)) + 2
    columns = max(terminal, width + 30)
    for kind, cls in kinds.items():  # whole sentences, wrapped under the description column
        text = f"{kind:{width}}{first_sentence(doc_of(cls))}"
        print(textwrap.fill(text, columns, subsequent_indent=" " * width))
    print("\n`gatekeeper checks KIND` prints a kind's whole doc and an example policy.")
    return 0


def _unknown(kind: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(kind, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"checks: no check kind {kind!r}{hint} (kinds: {', '.join(known)})"
