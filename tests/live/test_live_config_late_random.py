"""Live = check when the run's metadata comes late: random policies with `when:`, a
policy `match:`, `steps: {every: config.k[, default: 2]}` and bounds read from the
config (`max: config.bound`), over a run whose config is known from a random poll on
(a wandb `run.config.update`, an MLflow param logged late). Each poll goes through
`LiveGate`, as `watch` and `run` judge; its verdict must be a fresh evaluation's of the
same points under the config known then, and the last one `check`'s.

Found in the sixteenth session: a config that changed a period after points were
judged by the old one (a default, then `k: 3`) left `watch` judging by the old period
(FAIL where `check` passes); the daemon read the run again, `watch` did not. It now asks
its source to `rewind` and judges the whole run anew. And a rule the metadata made not
applicable still showed the violating steps of points judged before."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from gatekeeper.engine import evaluate
from gatekeeper.live.gate import LiveGate
from gatekeeper.model import Run, Series
from gatekeeper.sources.base import LiveSource, Poll
from tests.live.test_live_equals_final_random import (
    SIMPLE,
    _seen,
    _series,
    _steps,
    check_without_reference,
    drawn,
)

WHEN = ("when: {config.flag: {truthy: true}}", "when: {config.flag: {truthy: false}}",
        "when: {config.mode: a}")


def _policy(r: random.Random, n: int) -> str:
    rules = []
    for i in range(r.randint(1, 4)):
        kind, check = check_without_reference(r)
        if kind in ("max", "min", "lt", "gt") and r.random() < 0.3:
            check = f"{{{kind}: config.bound}}"
        parts = [f"id: r{i}", "metric: m", f"check: {check}"]
        if r.random() < 0.4:
            parts.append(r.choice(WHEN))
        steps = _steps(r, n)
        if r.random() < 0.3:
            steps = r.choice(["{every: config.k}", "{every: config.k, default: 2}"])
        if steps is not None:
            parts.append(f"steps: {steps}")
        if kind in SIMPLE and r.random() < 0.3:
            parts.append(f"reduce: {r.choice(['mean', 'last'])}")
        if r.random() < 0.3:
            parts.append(f"for: {r.randint(2, 3)}")
        rules.append("  - {" + ", ".join(parts) + "}")
    match = "match:\n  config: {mode: a}\n" if r.random() < 0.3 else ""
    return f"version: 1\nname: p\n{match}rules:\n" + "\n".join(rules) + "\n"


class _Scripted(LiveSource):
    """A run fed poll by poll from arrays, its config known from point `known` on; it
    can read the run again from its start (`rewind`), as the wandb and MLflow sources."""

    def __init__(self, steps: np.ndarray, values: np.ndarray, config: dict[str, Any],
                 known: int, ends: list[int]):  # fmt: skip
        super().__init__("scripted")
        self.steps, self.values, self.config, self.known = steps, values, config, known
        self.ends, self.at, self.again = iter(ends), 0, False

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return False

    def run(self, hi: int) -> Run:
        series = {"m": Series("m", self.steps[:hi].copy(), self.values[:hi].copy(),
                              "train/step")}  # fmt: skip
        return Run(name="r", source="scripted", series=series,
                   config=dict(self.config) if hi >= self.known else {})  # fmt: skip

    def read(self) -> Run:
        return self.run(self.at)

    def poll(self) -> Poll:
        lo, hi = (0, self.at) if self.again else (self.at, next(self.ends))
        self.at, self.again = hi, False
        part = Series("m", self.steps[lo:hi].copy(), self.values[lo:hi].copy(), "train/step")
        run = self.run(hi)
        run.series = {}
        return Poll(series={"m": part} if hi > lo else {}, run=run, points=hi - lo)

    def rewind(self) -> bool:
        self.again = True
        return True

    def cursor(self) -> dict[str, Any]:
        return {}

    def restore(self, cursor: dict[str, Any]) -> None:
        return None


def _judged_alike(seed: int, tmp: Path) -> bool:
    r = random.Random(seed)
    n = r.randint(5, 50)
    policies = drawn(tmp / f"p{seed}.yaml", _policy(r, n))
    if policies is None:
        return False
    steps, values = _series(r, n)
    config = {"flag": r.choice([True, False, None]), "mode": r.choice(["a", "b"]),
              "k": r.choice([2, 3, 0, "x"]), "bound": r.choice([0.2, 1.0, -0.3])}
    config = {k: v for k, v in config.items() if r.random() < 0.8}
    ends, hi = [], 0
    while hi < n:
        hi = min(n, hi + r.randint(1, 9))
        ends.append(hi)
    known = r.randint(0, n) if r.random() < 0.6 else 0
    source = _Scripted(steps, values, config, known, ends)
    gate = LiveGate(source, policies, started=0.0)
    for at in ends:
        live = gate.poll(float(at)).verdict
        assert _seen(live) == _seen(evaluate(policies, source.run(at), final=False)), (seed, at)
    final = gate.judge(float(n), final=True)
    assert _seen(final) == _seen(evaluate(policies, source.run(n))), seed
    return True


def test_random_policies_on_a_config_that_comes_late_judge_alike_live_and_whole(
    tmp_path: Path,
) -> None:
    judged = sum(_judged_alike(seed, tmp_path) for seed in range(1500))
    assert judged >= 1200  # the draws are policies the language takes, nearly all
