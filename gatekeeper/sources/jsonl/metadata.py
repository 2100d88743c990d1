"""Run metadata sidecar files next to JSONL records (`run.json`, `<record>.meta.json`)."""

from __future__ import annotations

import os
from typing import Any

import orjson

from gatekeeper.errors import RecordError, quote
from gatekeeper.model import RunState
from gatekeeper.safe_open import open_regular

SIDECAR_NAMES = ("run.json", "meta.json")
_FIELDS = {"name", "id", "tags", "config", "state", "url"}


def sidecar_for(path: str, is_dir: bool | None = None) -> str | None:
    """The metadata file of a record file or run directory, if there is one (`is_dir`:
    whether `path` is a directory, when the caller has just looked)."""
    if os.path.isdir(path) if is_dir is None else is_dir:
        candidates = [os.path.join(path, n) for n in SIDECAR_NAMES]
    else:
        stem = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
        directory = os.path.dirname(path) or "."
        candidates = [f"{stem}.meta.json"] + [os.path.join(directory, n) for n in SIDECAR_NAMES]
    # exists, not isfile: a FIFO named run.json is refused when read, not silently skipped
    return next((c for c in candidates if os.path.exists(c) and not os.path.isdir(c)), None)


MAX_SIDECAR_BYTES = 16 << 20  # metadata, not metrics: anything larger is not a sidecar


def read_sidecar(path: str) -> dict[str, Any]:
    """Parse and validate a sidecar: {"name", "id", "tags", "config", "state", "url"}."""
    try:
        with open_regular(path) as fh:
            raw = fh.read(MAX_SIDECAR_BYTES + 1)
        if len(raw) > MAX_SIDECAR_BYTES:
            raise RecordError(
                f"run metadata is larger than {MAX_SIDECAR_BYTES >> 20} MiB; a sidecar holds "
                "name, id, tags, config, state and url only",
                file=path,
            )
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"run metadata is not valid JSON: {exc}", file=path) from None
    except OSError as exc:
        raise RecordError(f"cannot read run metadata: {exc.strerror}", file=path) from None
    if not isinstance(data, dict):
        raise RecordError("run metadata must be a JSON object", file=path)
    unknown = set(data) - _FIELDS
    if unknown:
        raise RecordError(
            f"unknown run metadata field(s) {quote(sorted(unknown))}; expected some of "
            f"{sorted(_FIELDS)}",
            file=path,
        )
    for key in ("name", "id", "url"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise RecordError(f'"{key}" must be a string, got {quote(data[key])}', file=path)
    tags = data.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RecordError(f'"tags" must be a list of strings, got {quote(tags)}', file=path)
    if not isinstance(data.get("config", {}), dict):
        raise RecordError(f'"config" must be an object, got {quote(data["config"])}', file=path)
    state = data.get("state")
    if state is not None:
        try:
            data["state"] = RunState(state)
        except ValueError:
            raise RecordError(
                f'"state" must be one of {[s.value for s in RunState]}, got {quote(state)}',
                file=path,
            ) from None
    return data
