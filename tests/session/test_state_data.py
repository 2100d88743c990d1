"""A judging state saved as plain data and restored gives the verdicts of the state that
was never saved: for every check kind, selection, reduction and derived metric."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.statedata import StateDataError
from tests.helpers import write_policy
from tests.live.test_live_equals_final import CASES, _chunks, _run

EXTRA = """
  - {id: last, metric: m, steps: {last: 5}, check: {max: 0.7}}
  - {id: listed, metric: m, steps: [3, 50, 119], check: {max: 0.7}}
  - {id: every, metric: m, steps: {every: 7}, check: {max: 0.7}}
  - {id: first, metric: m, steps: first, check: {max: 2}}
  - {id: mean, metric: m, reduce: mean, check: {max: 0.7}}
  - {id: streak, metric: m, for: 3, check: {max: 0.52}}
  - {id: derived, expr: "m + n", check: {max: 5}}
"""


def _policies(tmp_path: Path, check: str) -> list:
    text = f"version: 1\nname: p\nrules:\n  - {{id: r, metric: m, check: {check}}}\n{EXTRA}"
    return load_policies([str(write_policy(tmp_path / "p.yaml", text))])


def _series(values: np.ndarray, lo: int, hi: int) -> dict[str, Series]:
    steps = np.arange(lo, hi, dtype=np.int64)
    return {
        "m": Series("m", steps, values[lo:hi], "train/step"),
        "n": Series("n", steps, np.ones(hi - lo), "train/step"),
    }


def _whole(values: np.ndarray) -> Run:
    run = _run(values)
    run.series.update(_series(values, 0, values.size))
    return run


@pytest.mark.parametrize("kind", sorted(CASES))
def test_saved_and_restored_state_judges_like_the_unsaved(kind: str, tmp_path: Path) -> None:
    check, passing, failing = CASES[kind]
    policies = _policies(tmp_path, check)
    for values in [*passing, *failing]:
        ev, kept = Evaluation(policies), Evaluation(policies)  # kept: never saved
        for lo, hi in _chunks(values.size):
            ev.feed(_series(values, lo, hi))
            kept.feed(_series(values, lo, hi))
            text = json.dumps(ev.to_state(), allow_nan=False)  # plain JSON, no NaN tokens
            ev = Evaluation.from_state(policies, json.loads(text))
            live = kept.verdict(_whole(values[:hi]), final=False).to_dict()
            assert ev.verdict(_whole(values[:hi]), final=False).to_dict() == live
        final = kept.verdict(_whole(values), final=True).to_dict()
        assert ev.verdict(_whole(values), final=True).to_dict() == final
        assert ev.verdict(_whole(values), final=True).status.value == evaluate(
            policies, _whole(values), final=True
        ).status.value


def test_a_state_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    policies = _policies(tmp_path, "{max: 1}")
    ev = Evaluation(policies)
    ev.feed(_series(np.full(20, 0.5), 0, 20))
    good = ev.to_state()
    bad = json.loads(json.dumps(good))
    bad["rules"][0]["tracker"]["selection"]["seen"] = "20; import os"
    seen = r"rules\[0\].tracker.selection.seen: expected an integer"
    with pytest.raises(StateDataError, match=seen):
        Evaluation.from_state(policies, bad)
    bad = json.loads(json.dumps(good))
    bad["rules"][0]["tracker"]["judgement"]["context"] = {"dtype": "O", "b64": ""}
    with pytest.raises(StateDataError, match="bad array dtype"):
        Evaluation.from_state(policies, bad)
    bad = json.loads(json.dumps(good))
    bad["rules"][0]["key"] = "p/other"
    with pytest.raises(StateDataError, match="not rule p/r"):
        Evaluation.from_state(policies, bad)
    bad = json.loads(json.dumps(good))
    bad["rules"][0]["tracker"]["judgement"]["context"] = {"dtype": "f8", "b64": "AAAA"}  # 3 bytes
    with pytest.raises(StateDataError, match="not whole f8 values"):
        Evaluation.from_state(policies, bad)
    with pytest.raises(StateDataError):
        Evaluation.from_state(policies, {"rules": []})


@pytest.mark.parametrize("with_reference", [True, False])
def test_isclose_and_rise_states_round_trip(tmp_path: Path, with_reference: bool) -> None:
    """Kinds the live-equals-final table leaves out; isclose keeps an Outcome (an error
    when the reference is missing) in its state."""
    text = (
        "version: 1\nname: p\nrules:\n"
        "  - {id: close, metric: m, check: {isclose: {reference: ref, abs_tol: 0.05}}}\n"
        "  - {id: rise, metric: m, check: {rise: {from_step: 10, by_step: 80, min: 0.3}}}\n"
    )
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    values = np.linspace(0.0, 1.0, 120)
    refs = {"ref": _whole(values)} if with_reference else {}
    ev, kept = Evaluation(policies), Evaluation(policies)
    for lo, hi in _chunks(values.size):
        ev.feed(_series(values, lo, hi))
        kept.feed(_series(values, lo, hi))
        live = kept.verdict(_whole(values[:hi]), final=False, references=refs).to_dict()
        assert ev.verdict(_whole(values[:hi]), final=False, references=refs).to_dict() == live
        ev = Evaluation.from_state(policies, json.loads(json.dumps(ev.to_state())))
    final = kept.verdict(_whole(values), final=True, references=refs).to_dict()
    assert ev.verdict(_whole(values), final=True, references=refs).to_dict() == final


@pytest.mark.parametrize(
    "dtype, kind", [("<f8", "f8"), ("<i8", "i8"), ("<u4", "i8"), ("bool", "b1"), ("<f4", "f8")]
)
def test_an_empty_array_is_saved_as_its_kind_and_restored_empty(dtype: str, kind: str) -> None:
    """An empty array (a mask check's lead-in on every poll) has its own short way out
    (statedata._array_out): the same data as the general path, the kind told by dtype."""
    from gatekeeper.statedata import decode, encode

    for shape in ((0,), (0, 3)):
        data = encode(np.empty(shape, dtype))
        assert data == {"dtype": kind, "b64": ""}
        back = decode(json.loads(json.dumps(data)), np.ndarray)
        assert back.size == 0 and back.dtype == {"f8": "<f8", "i8": "<i8", "b1": "bool"}[kind]
    with pytest.raises(TypeError, match="not state data"):
        encode(np.empty(0, "complex128"))
