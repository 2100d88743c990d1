"""The verdict as a JSON file inside a local run directory: `gatekeeper-verdict.json`."""

from __future__ import annotations

import os

import orjson

from gatekeeper.annotate import gate_tag, summary_keys
from gatekeeper.errors import SourceError
from gatekeeper.sources.wandb.local import resolve_run_dir
from gatekeeper.verdict import Verdict

FILE_NAME = "gatekeeper-verdict.json"


def verdict_path(path: str) -> str:
    """Where the verdict of the run at `path` goes (a wandb `latest-run` is followed)."""
    run_dir = resolve_run_dir(path) if os.path.isdir(path) or path.endswith(".wandb") else None
    if run_dir is None and os.path.isdir(path):
        run_dir = path
    if run_dir is not None:
        return os.path.join(run_dir, FILE_NAME)
    stem = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
    return f"{stem}.{FILE_NAME}"


def write_verdict_file(path: str, verdict: Verdict, report: str | None) -> str:
    """Write atomically (temp file + rename), so a reader never sees half a verdict."""
    target = verdict_path(path)
    body = {"tag": gate_tag(verdict), "summary": summary_keys(verdict, report), **verdict.to_dict()}
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        os.replace(tmp, target)
    except OSError as exc:
        raise SourceError(f"--annotate: cannot write {target}: {exc.strerror}") from None
    return f"annotated: wrote {target}"
