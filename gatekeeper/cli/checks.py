"""`gatekeeper checks`: list the check kinds policies can use."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("checks", help="list the check kinds policies can use")
    p.set_defaults(func=cmd_checks)


def cmd_checks(args: argparse.Namespace) -> int:
    from gatekeeper.checks import registry

    for kind, cls in registry().items():
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        print(f"{kind:10} {doc}")
    return 0
