"""`gatekeeper completion SHELL`: print a shell completion script for bash, zsh or fish."""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description="Print the completion script of SHELL. bash: source <(gatekeeper "
        "completion bash); zsh (after compinit): source <(gatekeeper completion zsh); fish: "
        "gatekeeper completion fish > ~/.config/fish/completions/gatekeeper.fish",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or fish")
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from gatekeeper import __version__
    from gatekeeper.cli.main import build_parser
    from gatekeeper.cli.shellcomplete import SHELLS as RENDER
    from gatekeeper.cli.shellcomplete import walk

    # every command, other packages' included: the script completes what is installed
    print(RENDER[args.shell](walk(build_parser()), __version__), end="")
    return 0
