"""A live verdict gives a rule its last result again while nothing the result is a
function of changed (`Evaluation._judged`, engine/__init__.py): its tracker's `changes`
(where the metadata decides its outcome: what the result reads of the tracker), the
outcome the run's metadata decides for it, the context fields its check reads (the
clock for `stale`), never on a final verdict. One input left out would repeat a stale
result: over random polls of every check kind — with the run's config, tags, state and
unreadable metrics changing, restarts from the saved row, config learned late, templates,
tail rules, final verdicts, a clock, a history store whose contents change under the
same object, and the daemon's bounded evaluation and an unbounded one — every verdict
must equal the one a twin evaluation makes judging every rule afresh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.daemon import payload
from gatekeeper.engine import Evaluation
from gatekeeper.model import Run, RunState, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import Verdict
from tests.helpers import write_policy
from tests.live.test_live_equals_final import CASES, REFERENCE
from tests.test_engine_state_cache import RULES

MORE = """
  - {id: when-a, metric: m, check: {max: 0.7}, when: {config.mode: a}}
  - {id: early-bound, metric: m, steps: {from: 0, to: 15}, reduce: max, check: {min: config.floor}}
  - {id: on-n, metric: n, check: {max: 5}}
"""
MATCHED = """version: 1
name: q
match: {config: {backend: megatron}}
requires_config: {lora_rank: 0}
allow_states: {crashed: a known crash}
rules:
  - {id: q-max, metric: m, check: {max: 0.7}}
  - {id: q-trend, metric: m, check: {trend: {window: 5, max_slope: 0.01}}}
"""
TAGGED = """version: 1
name: t
match: {tags: [canary]}
rules:
  - {id: t-fraction, metric: m, check: {fraction: {above: 0.6, max: 0.5, live: true}}}
"""


def _policies(tmp_path: Path) -> list[Any]:
    kinds = "".join(f"  - {{id: k-{k}, metric: m, check: {c}}}\n" for k, (c, _, _) in CASES.items())
    main = write_policy(tmp_path / "p.yaml", f"version: 1\nname: p\nrules:\n{kinds}{RULES}{MORE}")
    paths = [main, write_policy(tmp_path / "q.yaml", MATCHED)]
    return load_policies([str(p) for p in (*paths, write_policy(tmp_path / "t.yaml", TAGGED))])


def _poll(rng: np.random.Generator, lo: int, hi: int, nan: float) -> dict[str, Series]:
    """New points of each metric or not (a metric on the step axis may move it alone),
    a NaN in one point of `1/nan` (a NaN settles most rules: rare, or not at all)."""
    steps = np.arange(lo, hi, dtype=np.int64)
    values = 0.5 + rng.normal(0, 0.2, steps.size)
    values[rng.random(steps.size) < nan] = np.nan
    out = {}
    for metric, scale, p in (("m", 1, 0.8), ("n", 2, 0.7), ("eval/a/x", 1, 0.4)):
        if rng.random() < p:
            out[metric] = Series(metric, steps, values * scale, "train/step")
    return out


def _run(rng: np.random.Generator, i: int, ended: bool) -> Run:
    """The run's metadata, changing from poll to poll: what the policies read of it."""
    config: dict[str, Any] = {"period": 3} if i >= 4 else {}
    config |= {"key": "n"} if i >= 8 else {}
    config |= {"floor": float(rng.choice([0.1, 0.3]))} if rng.random() < 0.8 else {}
    config |= {"mode": str(rng.choice(["a", "b"]))}
    config |= {"backend": "megatron"} if rng.random() < 0.6 else {}
    config |= {"lora_rank": 0} if rng.random() < 0.7 else {}
    live = [RunState.RUNNING, RunState.UNKNOWN]
    states = [RunState.FINISHED, RunState.CRASHED, RunState.FAILED] if ended else live
    state = states[int(rng.integers(len(states)))]
    return Run(
        name="r",
        source="mem",
        config=config,
        tags=("canary",) if rng.random() < 0.5 else (),
        state=state,
        series={m: Series.empty(m, "train/step") for m in ("m", "n")},
        metric_errors={"n": "a null step"} if rng.random() < 0.15 else {},
        summary_values={"never": 0.5} if rng.random() < 0.5 else {},
    )


class _Store:
    """A history store that finds no baseline; what it names changes under one object."""

    def __init__(self) -> None:
        self.store = "store-0"

    def get(self, key: str) -> None:
        return None


def _text(verdict: Verdict) -> str:
    return json.dumps(verdict.to_dict(), sort_keys=True)


def _fresh(ev: Evaluation) -> Evaluation:
    for tracker in ev.trackers:  # no kept result: every rule judged
        tracker.kept = None
    return ev


def _restarted(ev: Evaluation, policies: list[Any]) -> Evaluation:
    data = payload.loads(payload.dumps(ev), "state.db", "r")
    return payload.restore(policies, data, "state.db", "r")


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_kept_results_equal_results_judged_afresh(
    tmp_path: Path, bounded: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    policies = _policies(tmp_path)
    ev, twin = Evaluation(policies, bounded=bounded), Evaluation(policies, bounded=bounded)
    hi, now, store, last, again, meta = 0, 0.0, _Store(), None, 0, 0
    nan = float(rng.choice([0.0, 0.003]))
    for i in range(30):
        lo, hi = hi, hi + int(rng.integers(0, 12))
        if rng.random() < 0.3:  # the metadata changes now and then, as a run's does
            meta = int(rng.integers(1 << 30))
        part = _poll(rng, lo, hi, nan)
        for e in (ev, twin):
            e.feed(part, _run(np.random.default_rng(meta), i, False))
        for _ in range(int(rng.integers(1, 4))):  # a verdict again with nothing fed
            now += float(rng.choice([0.0, 30.0, 90.0]))
            store.store = f"store-{int(rng.integers(3))}"
            final = bool(rng.random() < 0.1)
            given: dict[str, Any] = {
                "final": final,
                "now": now if rng.random() < 0.7 else None,
                "arrivals": {"m": float(rng.choice([0.0, now]))},
            }
            if not bounded:
                given |= {"references": REFERENCE if rng.random() < 0.7 else None}
                given |= {"history": store if rng.random() < 0.7 else None}
            if rng.random() < 0.2:
                meta = int(rng.integers(1 << 30))
            got = ev.verdict(_run(np.random.default_rng(meta), i, final), **given)
            before = {id(r) for r in last.results} if last is not None else set()
            again += sum(id(r) in before for r in got.results)
            last = got
            want = _fresh(twin).verdict(_run(np.random.default_rng(meta), i, final), **given)
            assert _text(got) == _text(want), (seed, i)
        if ev.reread() is not None:  # the daemon judges it again from its start
            ev, twin = Evaluation(policies, bounded=bounded), Evaluation(policies, bounded=bounded)
            hi = 0
        elif rng.random() < 0.25:  # a restart: each from the row the daemon saved
            ev, twin = _restarted(ev, policies), _restarted(twin, policies)
    assert again > 0  # results were given again, not only judged
