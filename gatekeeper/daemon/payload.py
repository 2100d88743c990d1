"""The stored judging state of one run: versioned JSON of its rule trackers.

A row holds `{"format", "state_version", "gatekeeper", "evaluation"}`; `evaluation` is
`engine.Evaluation.to_state()` (numbers, strings, lists — never objects). The store
checks the envelope; the trackers are restored against the run's policies, by their
declared field types, when the daemon starts (`restore`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from gatekeeper import __version__
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.statedata import StateDataError

FORMAT = "gatekeeper-run-state"
# Bump when a rule tracker's state (engine/tracker.py: its stages' dataclasses) or a
# check's state changes shape. A state of an older version is not read: its run is re-read
# from its source (`loads` says so); one of a newer version is refused (a downgrade).
# 2: a tracker's state is per stage (selection, reduction, judgement, aggregate).
# 3: bounded (engine.Evaluation(bounded=True)): its size follows the rules' windows, not
#    the run's length; a selection's parked/dropped/reread.
STATE_VERSION = 3


def dumps(evaluation: Evaluation) -> str:
    """The stored row. statedata.encode has made every non-finite float a string; orjson
    (every poll writes this, ~5x faster than json) would write a stray NaN as null, which
    decoding by declared type then refuses loudly — never a silent value."""
    data = {
        "format": FORMAT,
        "state_version": STATE_VERSION,
        "gatekeeper": __version__,
        "evaluation": evaluation.to_state(),
    }
    return orjson.dumps(data).decode()


def loads(text: Any, path: str, key: str) -> dict[str, Any] | None:
    """The evaluation data of a stored row; None when an older gatekeeper wrote it (the
    run is re-read from its source); StateError when the envelope is not ours."""
    try:
        data = json.loads(text) if isinstance(text, (str, bytes)) else None
    except ValueError as exc:
        raise refused(path, key, f"its state is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise refused(path, key, "its state is not a gatekeeper run state")
    if older(data.get("state_version")):
        return None
    if data.get("state_version") != STATE_VERSION:
        raise refused(
            path,
            key,
            f"its state has version {data.get('state_version')!r}, this gatekeeper "
            f"({__version__}) reads version {STATE_VERSION}",
        )
    if set(data) != {"format", "state_version", "gatekeeper", "evaluation"} or not isinstance(
        data["evaluation"], dict
    ):
        raise refused(path, key, "its state has unexpected fields")
    return data["evaluation"]


def older(version: Any) -> bool:
    """Whether `version` is an earlier state layout (not a tampered or a newer one)."""
    return type(version) is int and 1 <= version < STATE_VERSION


def restore(
    policies: list[PolicySpec], data: dict[str, Any], path: str, key: str
) -> Evaluation:
    """The run's Evaluation rebuilt from its data; StateError naming the bad field."""
    try:
        return Evaluation.from_state(policies, data)  # bounded or not, as it was saved
    except StateDataError as exc:
        raise refused(path, key, f"its state does not fit its rules: {exc}") from None


def refused(path: str, key: str, why: str) -> StateError:
    """A stored state that is malformed or tampered with: never run, never reset silently."""
    return StateError(
        f"state file {path}, run {key}: {why}. gatekeeper does not guess or start over on "
        f"its own: reset that run with `gatekeeper serve --reset-state {key}` (it is re-read "
        "from its source; its alert state is kept) or move the state file aside"
    )
