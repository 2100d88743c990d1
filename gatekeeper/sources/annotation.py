"""What an annotation says, shared by every family's `Annotator`.

A run on a server gets the `gate:pass`/`gate:fail` tag and `gatekeeper/*` summary keys; a
local run gets the same in a `gatekeeper-verdict.json` file. Where that file goes is the
family's business (a wandb run directory, next to a JSONL record); writing it is here.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from gatekeeper.errors import SourceError
from gatekeeper.verdict import GateStatus, Verdict

TAG_PASS = "gate:pass"
TAG_FAIL = "gate:fail"
TAG_NOTHING = "gate:nothing_judged"  # a final verdict that judged no gating rule
GATE_TAGS = (TAG_PASS, TAG_FAIL, TAG_NOTHING)  # replaced by the next verdict's tag
SUMMARY_PREFIX = "gatekeeper/"
FILE_NAME = "gatekeeper-verdict.json"


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
    """`gate:pass`/`gate:fail`/`gate:nothing_judged`, or None while a live verdict is
    still pending."""
    if verdict.status is GateStatus.PENDING:
        return None
    if verdict.status is GateStatus.NOTHING:
        return TAG_NOTHING
    return TAG_PASS if verdict.passed else TAG_FAIL


def write_verdict_file(target: str, verdict: Verdict, report: str | None) -> str:
    """Write the verdict to `target` atomically (temp file + rename), so a reader never
    sees half a verdict; returns the line saying so."""
    body = {"tag": gate_tag(verdict), "summary": summary_keys(verdict, report), **verdict.to_dict()}
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, target)
    except OSError as exc:
        raise SourceError(f"--annotate: cannot write {target}: {exc.strerror}") from None
    return f"annotated: wrote {target}"
