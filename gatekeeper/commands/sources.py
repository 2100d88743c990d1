"""`gatekeeper sources`: the run source kinds, with an example SOURCE for each (every kind
can be judged whole with `check` and followed with `watch`/`run`)."""

from __future__ import annotations

import argparse
from typing import Any

from gatekeeper.cli import EXTENSIONS

# Kinds whose class predates the `example` attribute, and the forms no class stands for.
_EXAMPLES = {
    "jsonl": "runs/grpo-7b.jsonl (or a directory of per-process *.jsonl records)",
    "wandb run directory": "wandb/latest-run (or wandb/offline-run-*/)",
    "wandb://ENTITY/PROJECT/RUN_ID": "wandb://my-team/grpo/abc123xy",
}


def cmd_sources(args: argparse.Namespace) -> int:
    from gatekeeper.sources import SOURCE_KINDS

    for kind in SOURCE_KINDS:
        example = getattr(kind, "example", None) or _EXAMPLES.get(kind.kind, "")
        print(f"{kind.kind}\n    e.g. {example}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("sources", help="list the run source kinds, with an example of each")
    p.set_defaults(func=cmd_sources)


EXTENSIONS.append(register)
