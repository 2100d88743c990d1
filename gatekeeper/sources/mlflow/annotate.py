"""The verdict onto an MLflow run: tags `gate` (pass/fail) and `gatekeeper.*`, plus the whole
verdict as the artifact `gatekeeper-verdict.json`.

Tags, not params: MLflow params are write-once, so a run judged twice (live, then final)
could not get its second verdict as a param.
"""

from __future__ import annotations

import orjson

from gatekeeper.sources.annotation import gate_tag, summary_keys
from gatekeeper.sources.mlflow.source import MlflowSource
from gatekeeper.verdict import Verdict

ARTIFACT = "gatekeeper-verdict.json"
_TAG_LIMIT = 5000  # MLflow's cap on a tag value


def verdict_tags(verdict: Verdict, report: str | None) -> dict[str, str]:
    tag = gate_tag(verdict)
    tags = {"gate": tag.split(":", 1)[1] if tag else "pending"}
    for key, value in summary_keys(verdict, report).items():
        if value is None:
            continue
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        tags[key.replace("gatekeeper/", "gatekeeper.")] = text[:_TAG_LIMIT]
    return tags


def annotate_run(source: str, verdict: Verdict, report: str | None) -> str:
    src = MlflowSource(source)
    client = src.client
    info = client.get_run(src.run_id)
    tags = verdict_tags(verdict, report)
    client.set_tags(src.run_id, tags)
    body = orjson.dumps(
        {"tag": gate_tag(verdict), **verdict.to_dict()},
        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY,
    )
    wrote = client.put_artifact(info, ARTIFACT, body)
    artifact = f", artifact {ARTIFACT}" if wrote else " (artifacts are not proxied by the server)"
    return f"annotated {source}: tags {', '.join(sorted(tags))}{artifact}"
