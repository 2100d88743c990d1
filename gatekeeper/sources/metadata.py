"""Run metadata sidecar files next to JSONL records (`run.json`, `<record>.meta.json`)."""

from __future__ import annotations

import os
from typing import Any

import orjson

from gatekeeper.errors import RecordError
from gatekeeper.model import RunState

SIDECAR_NAMES = ("run.json", "meta.json")
_FIELDS = {"name", "id", "tags", "config", "state", "url"}


def sidecar_for(path: str) -> str | None:
    """The metadata file of a record file or run directory, if there is one."""
    if os.path.isdir(path):
        candidates = [os.path.join(path, n) for n in SIDECAR_NAMES]
    else:
        stem = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
        directory = os.path.dirname(path) or "."
        candidates = [f"{stem}.meta.json"] + [os.path.join(directory, n) for n in SIDECAR_NAMES]
    return next((c for c in candidates if os.path.isfile(c)), None)


def read_sidecar(path: str) -> dict[str, Any]:
    """Parse and validate a sidecar: {"name", "id", "tags", "config", "state", "url"}."""
    try:
        with open(path, "rb") as fh:
            data = orjson.loads(fh.read())
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"run metadata is not valid JSON: {exc}", file=path) from None
    except OSError as exc:
        raise RecordError(f"cannot read run metadata: {exc.strerror}", file=path) from None
    if not isinstance(data, dict):
        raise RecordError("run metadata must be a JSON object", file=path)
    unknown = set(data) - _FIELDS
    if unknown:
        raise RecordError(
            f"unknown run metadata field(s) {sorted(unknown)}; expected some of {sorted(_FIELDS)}",
            file=path,
        )
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RecordError(f'"tags" must be a list of strings, got {tags!r}', file=path)
    if not isinstance(data.get("config", {}), dict):
        raise RecordError('"config" must be an object', file=path)
    state = data.get("state")
    if state is not None:
        try:
            data["state"] = RunState(state)
        except ValueError:
            raise RecordError(
                f'"state" must be one of {[s.value for s in RunState]}, got {state!r}', file=path
            ) from None
    return data
