"""Helpers for check tests: a policy from rule text, a run from point lists, chunked feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.verdict import RuleResult
from tests.helpers import write_policy


def policy(tmp_path: Path, rules: str, name: str = "p") -> list[PolicySpec]:
    text = f"version: 1\nname: {name}\nrules:\n{rules}"
    return load_policies([str(write_policy(tmp_path / f"{name}.yaml", text))])


def series(metric: str, values, steps=None, step_key: str = "train/step") -> Series:
    values = np.asarray(values, dtype=np.float64)
    steps = np.arange(values.size) if steps is None else np.asarray(steps)
    return Series(metric, steps.astype(np.int64), values, step_key)


def run_of(*ss: Series) -> Run:
    return Run(name="r", source="mem", series={s.metric: s for s in ss})


def judge(policies, run: Run, *, final: bool = True) -> RuleResult:
    (result,) = evaluate(policies, run, final=final).results
    return result


def judge_in_chunks(policies, run: Run, chunk: int, *, final: bool = True) -> RuleResult:
    """The same run fed poll by poll, `chunk` points of every metric at a time."""
    ev = Evaluation(policies)
    longest = max(len(s) for s in run.series.values())
    for lo in range(0, longest, chunk):
        ev.feed(
            {
                m: Series(m, s.steps[lo : lo + chunk], s.values[lo : lo + chunk], s.step_key)
                for m, s in run.series.items()
            }
        )
    (result,) = ev.verdict(run, final=final).results
    return result


def whole_and_chunked(policies, run: Run, chunks: tuple[int, ...]) -> list[tuple]:
    """What a reference comparison holds equal: the result judged whole and fed in each
    chunk size, as (status, step, repr(value), message, violations, judged) -- repr, so
    a NaN at an ERROR compares as the same NaN."""
    results = [judge(policies, run)] + [judge_in_chunks(policies, run, c) for c in chunks]
    return [(r.status, r.step, repr(r.value), r.message, r.violations, r.judged)
            for r in results]
