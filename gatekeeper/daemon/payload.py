"""What a run's row stores on every poll: its judging state, versioned JSON of its rule
trackers; and its verdict as JSON (`VerdictText`).

A row holds `{"format", "state_version", "gatekeeper", "evaluation"}`; `evaluation` is
`engine.Evaluation.to_state()` (numbers, strings, lists — never objects). The store
checks the envelope; the trackers are restored against the run's policies, by their
declared field types, when the daemon starts (`restore`).
"""

from __future__ import annotations

import json
import operator
import weakref
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import orjson

from gatekeeper import __version__
from gatekeeper.engine import Evaluation
from gatekeeper.errors import StateError
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.statedata import StateDataError
from gatekeeper.verdict import RuleResult, Verdict

FORMAT = "gatekeeper-run-state"
# Bump when a rule tracker's state (engine/tracker.py: its stages' dataclasses) or a
# check's state changes shape. A state of an older version is not read: its run is re-read
# from its source (`loads` says so); one of a newer version is refused (a downgrade).
# 2: a tracker's state is per stage (selection, reduction, judgement, aggregate).
# 3: bounded (engine.Evaluation(bounded=True)): its size follows the rules' windows, not
#    the run's length; a selection's parked/dropped/reread.
# 4: trend keeps its first point (`origin`): every window is fitted from its own points,
#    the same floats live as in `check`.
# 5: present_at keeps, before its axis is known, its metric's and `unless` points by axis
#    (engine/rounds.py `early`).
STATE_VERSION = 5


# per evaluation: id(tracker) -> (the tracker, its `changes`, its entry's JSON): an entry
# is encoded again only when its tracker's state may have changed (a steady poll changes
# about a third of the shipped policies' trackers). Kept as text, ~36 KB a run (orjson's
# bytes of a small entry hold ~8 KB of spare room each).
_ENCODED: weakref.WeakKeyDictionary[Evaluation, dict[int, tuple[Any, int, str]]] = (
    weakref.WeakKeyDictionary()
)


def dumps(evaluation: Evaluation) -> str:
    """The stored row: `orjson.dumps` of the envelope, to the byte, made of each rule
    entry's kept JSON. statedata.encode has made every non-finite float a string; orjson
    (every poll writes this, ~5x faster than json) would write a stray NaN as null, which
    decoding by declared type then refuses loudly — never a silent value."""
    kept, encoded = _ENCODED.get(evaluation, {}), {}

    def entry(tracker: Any, changes: int | None, make: Callable[[], Any]) -> str:
        hit = kept.get(id(tracker))
        if hit is not None and hit[0] is tracker and changes is not None and hit[1] == changes:
            text = hit[2]
        else:
            text = orjson.dumps(make()).decode()
        if changes is not None:
            encoded[id(tracker)] = (tracker, changes, text)
        return text

    parts = []
    for name, value in evaluation.to_state(entry).items():
        listed = name in ("rules", "made")  # of the entries' JSON
        body = f"[{','.join(value)}]" if listed else orjson.dumps(value).decode()
        parts.append(f'"{name}":{body}')  # the names are plain words
    _ENCODED[evaluation] = encoded  # only this poll's entries: nothing accumulates
    head = {"format": FORMAT, "state_version": STATE_VERSION, "gatekeeper": __version__}
    return f'{orjson.dumps(head).decode()[:-1]},"evaluation":{{{",".join(parts)}}}}}'


class VerdictText:
    """A run's verdict as stored: `verdict.to_dict()` and its `json.dumps` text (`json`,
    never orjson: a history corridor may hold a NaN, which orjson writes as null). A
    result whose every field is the one of the last poll's in its place (==, and the
    value of the same type) is given as the dict and JSON made of that one: a steady poll
    changes a few results, and the engine gives most of the others as the very result of
    the last poll (compared first, by identity). Kept per result: the result (references:
    each field is immutable or made afresh for it, `engine._plot` copies what it shares),
    its dict and JSON."""

    def __init__(self) -> None:
        self._kept: list[tuple[RuleResult, dict[str, Any], str]] = []

    def encode(self, verdict: Verdict) -> tuple[dict[str, Any], str]:
        kept, fresh = self._kept, []
        for i, result in enumerate(verdict.results):
            hit = kept[i] if i < len(kept) else None
            if hit is None or (hit[0] is not result and not _same(hit[0], result)):
                data = result.to_dict()
                hit = (result, data, _JSON(data))
            elif hit[0] is not result:
                hit = (result, hit[1], hit[2])
            fresh.append(hit)
        self._kept = fresh
        data = verdict.to_dict(results=[h[1] for h in fresh])
        head = _JSON({k: v for k, v in data.items() if k != "results"})
        return data, f'{head[:-1]}, "results": [{", ".join(h[2] for h in fresh)}]}}'


# `json.dumps`, to the byte, less its look for reference cycles (made of `to_dict`, the
# data has none): ~1 us of ~8 a result
_JSON = json.JSONEncoder(check_circular=False).encode
_FIELDS = operator.attrgetter(*(f.name for f in fields(RuleResult)))


def _same(a: RuleResult, b: RuleResult) -> bool:
    """Every field equal, and the value of the same type (1 == 1.0 == True, but their
    JSON differs)."""
    return type(a.value) is type(b.value) and _FIELDS(a) == _FIELDS(b)


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
