"""`gatekeeper sources`: the run source families, with the extra each needs and example
SOURCE strings (every kind can be judged whole with `check` and followed with
`watch`/`run`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("sources", help="list the run source kinds, with an example of each")
    p.set_defaults(func=cmd_sources)


def cmd_sources(args: argparse.Namespace) -> int:
    from gatekeeper.sources import FAMILIES
    from gatekeeper.sources.plugins import SOURCES

    for family in FAMILIES:
        needs = f" (gatekeeper[{family.extra}])" if family.extra else ""
        print(f"{family.name}{needs}")
        for example in family.examples:
            print(f"    e.g. {example}")
    for name, kind in SOURCES.all().items():  # plug-ins, tried before the built-ins
        print(f"{name} (plug-in)\n    e.g. {getattr(kind, 'example', '') or kind.kind}")
    return 0
