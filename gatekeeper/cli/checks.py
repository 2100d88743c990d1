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
        # the kind module's first docstring line; a plug-in's module may have none
        module_doc = getattr(sys.modules.get(cls.__module__), "__doc__", None)
        lines = (module_doc or cls.__doc__ or "").strip().splitlines()
        print(f"{kind:10} {lines[0] if lines else '(no description)'}")
    return 0
