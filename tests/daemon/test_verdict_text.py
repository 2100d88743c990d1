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
