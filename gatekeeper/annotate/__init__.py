"""Write a verdict back onto the run it judged (`check --annotate`, `watch --annotate`).

Only dispatch and the command-line surface live here: each source family's `Annotator`
(`gatekeeper/sources/<family>/annotate.py`) decides what is written and where. A
`wandb://` run gets a `gate:pass`/`gate:fail` tag and summary keys under `gatekeeper/`;
a local run directory (wandb or JSONL) gets a `gatekeeper-verdict.json` file in it.
"""

from __future__ import annotations

import os

from gatekeeper.errors import UsageError
from gatekeeper.sources import FAMILIES
from gatekeeper.sources.annotation import (
    SUMMARY_PREFIX,
    TAG_FAIL,
    TAG_PASS,
    gate_tag,
    summary_keys,
)
from gatekeeper.verdict import Verdict


def report_link(json_path: str | None = None) -> str | None:
    """Where the full report is: the CI run's page on GitHub Actions, else the JSON file."""
    env = os.environ
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{env.get('GITHUB_REPOSITORY', '')}/actions/runs/{env['GITHUB_RUN_ID']}"
    return os.path.abspath(json_path) if json_path else None


def annotate(source: str, verdict: Verdict, report: str | None = None) -> str:
    """Write `verdict` onto the run `source` names; returns a line saying what was written."""
    for family in FAMILIES:
        if family.annotator is not None and family.annotator.accepts(source):
            return family.annotator.annotate(source, verdict, report)
    raise UsageError(
        f"--annotate: cannot annotate {source!r}; it supports wandb://ENTITY/PROJECT/RUN_ID "
        "and local run directories"
    )


__all__ = [
    "SUMMARY_PREFIX", "TAG_FAIL", "TAG_PASS", "annotate", "gate_tag",
    "report_link", "summary_keys",
]
