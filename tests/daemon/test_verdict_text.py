"""The daemon stores a run's verdict as `json.dumps(verdict.to_dict())` on every poll,
made of the JSON it kept of each result equal to the last poll's (payload.VerdictText):
the text must be that of the whole verdict made afresh, NaN and Infinity included (never
null), whatever changed between polls."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gatekeeper.daemon.payload import VerdictText
from gatekeeper.engine import Evaluation
from tests.test_engine_state_cache import _policies, _poll, _run


def test_kept_result_json_makes_the_verdicts_text(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    ev, texts, hi, reused, changed = Evaluation(_policies(tmp_path)), VerdictText(), 0, 0, 0
    for i in range(30):
        lo, hi = hi, hi + int(rng.integers(0, 6))
        run = _run(i % 14, i == 29)
        ev.feed(_poll(rng, lo, hi), run)
        verdict = ev.verdict(run, final=i == 29)
        before = list(texts._kept)
        data, text = texts.encode(verdict)
        assert text == json.dumps(verdict.to_dict())
        assert json.loads(text)["results"] == json.loads(json.dumps(data))["results"]
        same = sum(a[2] is b[2] for a, b in zip(before, texts._kept, strict=False))
        reused, changed = reused + same, changed + len(verdict.results) - same
    assert reused > 0 and changed > 0  # kept JSON was used, changed results made anew
    nan = [r for r in verdict.results if isinstance(r.value, float) and math.isnan(r.value)]
    assert nan and '"value": "NaN"' in text  # the finite rule's NaN, said as NaN


def test_each_field_changed_alone_makes_the_result_again() -> None:
    """A result kept from the last poll is given again only while every field is equal
    (and its value of the same type): each change below, alone, must give `json.dumps`
    of the whole — a value of another type (1 -> 1.0 -> True), a NaN, text to escape, a
    tuple, the plot's dicts. (Nested values compare by ==: the plot's parameters are the
    check's model dump, of declared types, so 1 and 1.0 do not take turns there.)"""
    from dataclasses import replace

    from gatekeeper.verdict import Mode, RuleResult, Severity, Status, Verdict

    base = RuleResult(
        "p", "r", Status.PASS, Severity.FAIL, Mode.ENFORCE, metric="m", message="ok",
        source="p.yaml:3", step=1, value=1, description="d \"quoted\" \u00e9\n",
        check={"kind": "max", "value": 1}, span=(0, 1),
    )
    other = replace(base, rule="s", value=0.5)
    changes = [
        {"value": 1.0}, {"value": True}, {"value": math.nan}, {"value": math.nan},
        {"value": math.inf}, {"value": 2.5e-07}, {"value": None}, {"step": 7},
        {"message": "caf\u00e9 \"x\" \\ \u2028 \U0001f600"}, {"span": (0, 9)}, {"span": None},
        {"violating_steps": (3, 4)}, {"check": {"kind": "max", "value": 2.0}},
        {"check": {"kind": "max", "value": math.nan}}, {"overlay": {"lo": [1.0, math.nan]}},
        {"status": Status.FAIL}, {"judged": 10, "violations": 2}, {"not_judged": "n/a"},
        {"expected": "x <= 1"}, {},
    ]
    texts, result, made = VerdictText(), base, 0
    for change in changes:
        result = replace(result, **change) if change else result
        verdict = Verdict(run={"name": "x", "points": made}, results=[result, other], final=False)
        before = list(texts._kept)
        data, text = texts.encode(verdict)
        assert text == json.dumps(verdict.to_dict()), change
        assert json.dumps(data) == text  # the dict kept is the one the text says
        made += before[0][2] is not texts._kept[0][2] if before else 1
        assert before[1][2] is texts._kept[1][2] if before else True  # unchanged: kept
    # each change made its JSON again, but `{}` and the same NaN object again (== itself)
    assert made == len(changes) - 2
