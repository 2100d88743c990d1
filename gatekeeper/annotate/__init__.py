"""Write a verdict back onto the run it judged (`check --annotate`, `watch --annotate`).

A `wandb://` run gets a `gate:pass`/`gate:fail` tag and summary keys under `gatekeeper/`;
a local run directory (wandb or JSONL) gets a `gatekeeper-verdict.json` file in it.
"""

from __future__ import annotations

import os
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.verdict import GateStatus, Verdict

TAG_PASS = "gate:pass"
TAG_FAIL = "gate:fail"
SUMMARY_PREFIX = "gatekeeper/"


def summary_keys(verdict: Verdict, report: str | None) -> dict[str, Any]:
    """The `gatekeeper/*` keys describing a verdict (also the local file's `summary`)."""
    failing = [f"{r.policy}/{r.rule}" for r in verdict.failing()]
    policies = sorted({r.policy for r in verdict.results})
    return {
        f"{SUMMARY_PREFIX}status": verdict.status.value,
        f"{SUMMARY_PREFIX}final": verdict.final,
        f"{SUMMARY_PREFIX}failing_rules": failing,
        f"{SUMMARY_PREFIX}policies": policies,
        f"{SUMMARY_PREFIX}counts": verdict.counts(),
        f"{SUMMARY_PREFIX}report": report,
    }


def gate_tag(verdict: Verdict) -> str | None:
    """`gate:pass`/`gate:fail`, or None while a live verdict is still pending."""
    if verdict.status is GateStatus.PENDING:
        return None
    return TAG_PASS if verdict.passed else TAG_FAIL


def report_link(json_path: str | None = None) -> str | None:
    """Where the full report is: the CI run's page on GitHub Actions, else the JSON file."""
    env = os.environ
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{env.get('GITHUB_REPOSITORY', '')}/actions/runs/{env['GITHUB_RUN_ID']}"
    return os.path.abspath(json_path) if json_path else None


def annotate(source: str, verdict: Verdict, report: str | None = None) -> str:
    """Write `verdict` onto the run `source` names; returns a line saying what was written."""
    if source.startswith("wandb://"):
        from gatekeeper.annotate.wandb_run import annotate_remote

        return annotate_remote(source, verdict, report)
    if source.startswith(("mlflow+", "mlflow://")):
        from gatekeeper.sources.mlflow.annotate import annotate_run

        return annotate_run(source, verdict, report)
    if source.startswith(("tensorboard://", "tb://")):  # a local run directory too
        source = source.split("://", 1)[1]
    path = source.removeprefix("file://")
    if "://" in source and not source.startswith("file://"):
        raise UsageError(
            f"--annotate: cannot annotate {source!r}; it supports wandb://ENTITY/PROJECT/RUN_ID, "
            "MLflow runs and local run directories"
        )
    from gatekeeper.annotate.local import write_verdict_file

    return write_verdict_file(path, verdict, report)





def add_annotate_arg(parser: Any) -> None:
    """The `--annotate` option of `check` and `watch` (off by default)."""
    parser.add_argument(
        "--annotate", action="store_true",
        help="write the verdict onto the run: wandb:// runs get a gate:pass/gate:fail tag and "
        "gatekeeper/* summary keys; a local run directory gets gatekeeper-verdict.json",
    )


def annotate_from_args(args: Any, verdict: Verdict) -> None:
    """Annotate when `--annotate` was given; prints what was written."""
    if getattr(args, "annotate", False):
        print(annotate(args.source, verdict, report_link(getattr(args, "json_path", None))))


__all__ = [
    "TAG_FAIL", "TAG_PASS", "add_annotate_arg", "annotate", "annotate_from_args", "gate_tag",
    "report_link", "summary_keys",
]
