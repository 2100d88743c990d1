"""Live = final on random policies and runs: every check kind with random parameters,
`steps:`, `reduce:` and `for:`, on runs whose values come from a small grid (so a value
lands exactly on a bound, a mean on a threshold, a rise on its minimum) with gaps in the
steps and the odd NaN/Inf. Each run is fed in random polls; after every poll the live
verdict must be the verdict of a fresh evaluation of the same points (status, message,
step, value, points judged, violations), and the last poll's final verdict `check`'s.

A second draw has two metrics on one axis (the second sparser, later, or never logged,
the first sometimes stopping early), polled by step: `expr:` rules over both,
`present_at`, `if_logged`, and `last` selections whose metric stopped.

A third draw is the daemon's: template rules (`metric: e/*/x`, `metric: config.key`) over
metrics that appear at different polls and a config that may come late, judged by a
bounded evaluation whose state goes through JSON and back at random polls (a restart).

Found in the fourteenth session: `isclose` reported whichever came first in the points a
poll held -- a missing or non-finite reference anywhere in them before any point out of
tolerance -- so a run failing at step 5 whose reference had a NaN at step 48 was FAIL
live and ERROR in `check`; `isclose` and `rise` counted as judged the points after the
one that decided them, in that poll only; `present_at` left out of its axis' last step
the points of its own metric that came before the `steps_of` metric (in a poll, or
before its first point), so `check` settled fewer rounds than the polls had; a state
restored with a `config.KEY` rule made for a metric not fed yet marked that metric as
fed, so the pattern rules matching it were never made when its points came (silently
not judged after a daemon restart).

A fourth draw puts `present_at`'s metric, its `steps_of` and its `unless` metric each on
one of two step axes, each axis' rows whole and in order, the axes interleaved at random.
Found in the sixteenth session: points fed before the first `steps_of` point were taken
whatever their axis (present where `check` saw none) or, for `unless`, dropped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.errors import GatekeeperError
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import Verdict
from tests.helpers import write_policy

GRID = [0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 1.45, 1.95, -0.3, 1.0]
POSITIVE = [v for v in GRID if v > 0]
SIMPLE = ("max", "min", "abs_max", "lt", "gt", "abs_lt", "between", "strictly_between",
          "approx", "finite")  # the kinds a `reduce:` may judge
KINDS = (*SIMPLE, "reach", "spike", "trend", "flat", "fraction", "rise", "isclose")


def drawn(path: Path, text: str) -> list[Any] | None:
    """The drawn policy, written and loaded; None for a draw the language refuses (a
    check that takes no `for:`, ...)."""
    try:
        return load_policies([str(write_policy(path, text))])
    except GatekeeperError:
        return None


def _check(r: random.Random) -> tuple[str, str]:
    """A kind and its check, parameters drawn from the grid."""
    k, g = r.choice(KINDS), lambda: r.choice(GRID)
    if k in ("max", "min", "lt", "gt"):
        return k, f"{{{k}: {g()}}}"
    if k in ("abs_max", "abs_lt"):
        return k, f"{{{k}: {r.choice(POSITIVE)}}}"
    if k in ("between", "strictly_between"):
        lo, hi = sorted(r.sample(GRID, 2))
        return k, f"{{{k}: [{lo}, {hi}]}}"
    params = {
        "approx": f"value: {g()}, {r.choice(['abs', 'rel'])}: {r.choice(POSITIVE)}",
        "reach": f"value: {g()}, by_step: {r.randint(0, 60)}, window: {r.randint(1, 6)}",
        "spike": f"window: {r.randint(3, 8)}, factor: {r.choice([0.5, 1, 2, 3])}, "
                 f"direction: {r.choice(['up', 'down', 'both'])}, "
                 f"min_scale: {r.choice([0.0, 0.1, 0.25])}",
        "trend": f"window: {r.randint(3, 8)}, "
                 f"{r.choice(['max_slope', 'min_slope', 'max_growth', 'min_growth'])}: "
                 f"{r.choice([0.0, 0.01, -0.01, 0.05, 0.1])}",
        "flat": f"window: {r.randint(2, 8)}, min_std: {r.choice([0.0, 0.05, 0.1, 0.25])}",
        "fraction": f"{r.choice(['above', 'below'])}: {g()}, "
                    f"{r.choice(['max', 'min'])}: {r.choice([0.0, 0.2, 0.5, 1.0])}, "
                    f"min_points: {r.randint(1, 10)}",
        "rise": f"from_step: {r.randint(0, 10)}, by_step: {r.randint(11, 60)}, "
                f"min: {r.choice([0.0, 0.1, 0.3, -0.1])}",
        "isclose": f"reference: ref, rel_tol: {r.choice([0.0, 0.1])}, "
                   f"abs_tol: {r.choice([0.0, 0.05, 0.1])}",
    }
    return k, "{finite: true}" if k == "finite" else f"{{{k}: {{{params[k]}}}}}"


def _steps(r: random.Random, n: int) -> str | None:
    if r.random() < 0.45:
        return None
    return r.choice([
        "first", "last", f"[{r.randint(0, n)}, {r.randint(n, 2 * n)}]",
        f"{{from: {r.randint(0, n)}, to: {r.randint(n, 2 * n)}}}", f"{{from: {r.randint(0, n)}}}",
        f"{{last: {r.randint(1, 6)}}}", f"{{every: {r.randint(2, 5)}, offset: {r.randint(0, 1)}}}",
    ])


EXPRS = ("m - n", "m / n", "abs(m - n)", "max(m, n)", "m * 2 - n", "log(m)", "exp(n) - 1")


def _policy(r: random.Random, n: int, two: bool = False) -> str:
    """Rules on m; with `two`, on n or an `expr:` of both too, and `present_at`."""
    rules = []
    for i in range(r.randint(1, 4)):
        kind, check = _check(r)
        target = "metric: m"
        if two:
            target = r.choice(["metric: m", "metric: n", f'expr: "{r.choice(EXPRS)}"'])
            if kind == "isclose" or r.random() < 0.1:
                kind, check = "present_at", f"{{present_at: {r.choice('mn')}}}"
        parts = [f"id: r{i}", target, f"check: {check}"]
        if two and r.random() < 0.2:
            parts.append("if_logged: true")
        if kind != "present_at" and (steps := _steps(r, n)) is not None:
            parts.append(f"steps: {steps}")
        if kind in SIMPLE and r.random() < 0.4:
            parts.append(f"reduce: {r.choice(['mean', 'median', 'min', 'max', 'last'])}")
        if kind != "present_at" and r.random() < 0.4:
            parts.append(f"for: {r.randint(2, 3)}")
        rules.append("  - {" + ", ".join(parts) + "}")
    return "version: 1\nname: p\nrules:\n" + "\n".join(rules) + "\n"


def _series(r: random.Random, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps with gaps; values from the grid: at random, alternating two, or nudged."""
    shape = r.random()
    if shape < 0.3:
        values = np.array([r.choice(GRID) for _ in range(n)])
    elif shape < 0.6:
        a, b = r.choice(GRID), r.choice(GRID)
        values = np.array([a if i % 2 else b for i in range(n)])
    else:
        values = np.round([r.choice(GRID) + r.choice([0, 0.05, -0.05]) for _ in range(n)], 6)
    if r.random() < 0.15:
        values[r.randrange(n)] = r.choice([np.nan, np.inf, -np.inf])
    gaps = np.array([r.choice([1, 1, 1, 2, 3]) for _ in range(n)])
    return (np.cumsum(gaps) - gaps[0] + r.choice([0, 0, 5])).astype(np.int64), values


def _seen(verdict: Verdict) -> list[tuple[Any, ...]]:
    return [(x.rule, x.status, x.message, x.step, "nan" if x.value != x.value else x.value,
             x.judged, x.violations, x.violating_steps) for x in verdict.results]


def _run(steps: np.ndarray, values: np.ndarray) -> Run:
    return Run(name="r", source="mem", series={"m": Series("m", steps, values, "train/step")})


def _two(r: random.Random, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """m, and n: a sparser subset of m's steps, its second half, never logged, or steps
    of its own; m sometimes stops early."""
    sm, vm = _series(r, n)
    sn, vn = _series(r, n)
    shape = r.random()
    if shape < 0.4:
        keep = np.array([i == 0 or r.random() < 0.6 for i in range(n)])
        sn, vn = sm[keep], vn[keep]
    elif shape < 0.55:
        sn, vn = sn[:0], vn[:0]
    elif shape < 0.7:
        late = sm >= sm[n // 2]
        sn, vn = sm[late], vn[: int(late.sum())]
    if r.random() < 0.2:
        cut = r.randint(1, n)
        sm, vm = sm[:cut], vm[:cut]
    return {"m": (sm, vm), "n": (sn, vn)}


def _between(data: dict[str, tuple[np.ndarray, np.ndarray]], lo: int, hi: int) -> Run:
    """The points at steps lo < step <= hi of each metric that has some."""
    series = {}
    for name, (steps, values) in data.items():
        sel = (steps > lo) & (steps <= hi)
        if sel.any():
            series[name] = Series(name, steps[sel].copy(), values[sel].copy(), "train/step")
    return Run(name="r", source="mem", series=series)


def _judged_alike(seed: int, tmp: Path) -> bool:
    """The seed's policy and run, polled and whole; False if the policy is refused."""
    r = random.Random(seed)
    n = r.randint(5, 60)
    policies = drawn(tmp / f"p{seed}.yaml", _policy(r, n))
    if policies is None:  # a draw the language refuses (a check that takes no `for:`)
        return False
    steps, values = _series(r, n)
    refs = {"ref": _run(steps.copy(), _series(r, n)[1])}
    ev, lo = Evaluation(policies), 0
    while lo < n:
        hi = min(n, lo + r.randint(1, 9))
        ev.feed({"m": Series("m", steps[lo:hi].copy(), values[lo:hi].copy(), "train/step")})
        prefix = _run(steps[:hi].copy(), values[:hi].copy())
        live = ev.verdict(prefix, final=False, references=refs)
        fresh = evaluate(policies, prefix, final=False, references=refs)
        assert _seen(live) == _seen(fresh), (seed, hi)
        lo = hi
    whole = _run(steps, values)
    final = ev.verdict(whole, final=True, references=refs)
    assert _seen(final) == _seen(evaluate(policies, whole, references=refs)), seed
    return True


def _two_judged_alike(seed: int, tmp: Path) -> bool:
    """As `_judged_alike`, two metrics polled by step."""
    r = random.Random(seed)
    n = r.randint(5, 60)
    policies = drawn(tmp / f"q{seed}.yaml", _policy(r, n, True))
    if policies is None:
        return False
    data = _two(r, n)
    top, lo = int(max(s.max() for s, _ in data.values() if s.size)), -1
    ev = Evaluation(policies)
    while lo < top:
        hi = min(top, lo + r.randint(1, 12))
        ev.feed(_between(data, lo, hi).series)
        live = ev.verdict(_between(data, -1, hi), final=False)
        fresh = evaluate(policies, _between(data, -1, hi), final=False)
        assert _seen(live) == _seen(fresh), (seed, hi)
        lo = hi
    final = ev.verdict(_between(data, -1, top), final=True)
    assert _seen(final) == _seen(evaluate(policies, _between(data, -1, top))), seed
    return True


def check_without_reference(r: random.Random) -> tuple[str, str]:
    """As `_check`, `finite` for `isclose` (a draw with no reference run to compare to)."""
    kind, check = _check(r)
    return ("finite", "{finite: true}") if kind == "isclose" else (kind, check)


def _templates(r: random.Random, n: int) -> str:
    rules = []
    for i in range(r.randint(1, 4)):
        kind, check = check_without_reference(r)
        target = r.choice(["e/*/x", "e/*/x", "config.key", "e/a/x"])
        parts = [f"id: r{i}", f"metric: {target}", f"check: {check}"]
        if (steps := _steps(r, n)) is not None:
            parts.append(f"steps: {steps}")
        if kind in SIMPLE and r.random() < 0.3:
            parts.append(f"reduce: {r.choice(['mean', 'last'])}")
        if r.random() < 0.2:
            parts.append("if_logged: true")
        rules.append("  - {" + ", ".join(parts) + "}")
    return "version: 1\nname: p\nrules:\n" + "\n".join(rules) + "\n"


def _templates_judged_alike(seed: int, tmp: Path) -> bool:
    """Template rules, metrics starting at random steps, the config known from a random
    step; bounded, restored from its state as JSON at random polls (the daemon's path)."""
    r = random.Random(seed)
    n = r.randint(5, 50)
    policies = drawn(tmp / f"t{seed}.yaml", _templates(r, n))
    if policies is None:
        return False
    data = {}
    for name in ("e/a/x", "e/b/x", "e/c/x"):
        if r.random() < 0.8:
            steps, values = _series(r, n)
            start = r.randint(0, n - 1) if r.random() < 0.5 else 0
            data[name] = (steps[start:], values[start:])
    config = {"key": r.choice(["e/a/x", "e/b/x", "e/zz/x"])}
    config_from = r.randint(0, n) if r.random() < 0.4 else -1

    def run(lo: int, hi: int) -> Run:
        at = _between(data, lo, hi)
        at.config = dict(config) if hi >= config_from else {}
        return at

    if not data:
        return False
    top, lo = int(max(s.max() for s, _ in data.values() if s.size)), -1
    ev = Evaluation(policies, bounded=True)
    while lo < top:
        hi = min(top, lo + r.randint(1, 12))
        ev.feed(run(lo, hi).series, run(lo, hi))
        if ev.reread() is not None:  # the config named a metric fed already: read again
            return False
        if r.random() < 0.35:  # a restart: the state through JSON, as the daemon stores it
            ev.verdict(run(-1, hi), final=False)
            ev = Evaluation.from_state(policies, orjson.loads(orjson.dumps(ev.to_state())))
        fresh = Evaluation(policies, bounded=True)
        fresh.feed(run(-1, hi).series, run(-1, hi))
        live = ev.verdict(run(-1, hi), final=False)
        assert _seen(live) == _seen(fresh.verdict(run(-1, hi), final=False)), (seed, hi)
        lo = hi
    final = ev.verdict(run(-1, top), final=True)
    assert _seen(final) == _seen(evaluate(policies, run(-1, top))), seed
    return True


def _axes_judged_alike(seed: int, tmp: Path) -> None:
    """present_at with a, b (steps_of) and c (unless) on random axes, fed axis rows
    interleaved; the state through JSON at random polls when bounded."""
    r = random.Random(seed)
    extra = r.choice(["", ", for: 2", ", steps: {last: 3}"])
    unless = r.choice(["", ", unless: c"])
    text = ("version: 1\nname: p\nrules:\n  - {id: r, metric: a, "
            f"check: {{present_at: {{steps_of: b{unless}}}}}{extra}}}\n")
    policies = load_policies([str(write_policy(tmp / f"x{seed}.yaml", text))])
    axis_of = {m: r.choice(["x/step", "y/step"]) for m in "abc"}
    rows: list[tuple[int, list[str]]] = []  # (step, metrics) of one axis, in step order
    lanes: dict[str, list[int]] = {}  # axis -> its rows, as indices into `rows`
    for axis in ("x/step", "y/step"):
        step = r.randint(0, 5)
        for _ in range(r.randint(0, 25)):
            if names := [m for m in "abc" if axis_of[m] == axis and r.random() < 0.5]:
                lanes.setdefault(axis, []).append(len(rows))
                rows.append((step, names))
            step += r.randint(1, 3)
    picks = [axis for axis, ids in lanes.items() for _ in ids]
    r.shuffle(picks)  # the axes interleaved at random, each in its own order
    order = [lanes[axis].pop(0) for axis in picks]

    def run(ids: list[int]) -> Run:
        points: dict[str, list[int]] = {}
        for i in ids:
            for m in rows[i][1]:
                points.setdefault(m, []).append(rows[i][0])
        return Run(name="r", source="mem", series={
            m: Series(m, np.asarray(st, dtype=np.int64), np.ones(len(st)), axis_of[m])
            for m, st in points.items()})

    bounded = r.random() < 0.5
    ev, fed = Evaluation(policies, bounded=bounded), []
    while len(fed) < len(order):
        batch = order[len(fed) : len(fed) + r.randint(1, 5)]
        fed += batch
        if bounded and r.random() < 0.3:
            ev = Evaluation.from_state(policies, orjson.loads(orjson.dumps(ev.to_state())))
        ev.feed(run(batch).series)
        live = ev.verdict(run(fed), final=False)
        assert _seen(live) == _seen(evaluate(policies, run(fed), final=False)), (seed, fed)
    final = ev.verdict(run(fed), final=True)
    assert _seen(final) == _seen(evaluate(policies, run(fed))), seed


def test_present_at_across_axes_judges_alike_polled_and_whole(tmp_path: Path) -> None:
    for seed in range(400):
        _axes_judged_alike(seed, tmp_path)


@pytest.mark.parametrize("block", range(4))
def test_random_policies_judge_alike_polled_and_whole(block: int, tmp_path: Path) -> None:
    judged = sum(_judged_alike(seed, tmp_path) for seed in range(block * 150, block * 150 + 150))
    assert judged >= 130  # the draws are policies the language takes, nearly all


@pytest.mark.parametrize("block", range(2))
def test_random_policies_on_two_metrics_judge_alike_polled_and_whole(
    block: int, tmp_path: Path
) -> None:
    seeds = range(block * 200, block * 200 + 200)
    judged = sum(_two_judged_alike(seed, tmp_path) for seed in seeds)
    assert judged >= 150


def test_isclose_reports_the_first_point_that_decides_in_step_order(tmp_path: Path) -> None:
    """Out of tolerance at step 5, the reference NaN at step 48: FAIL at 5 whatever the
    polls (`check` said ERROR at 48: its one comparison held both), 6 points judged."""
    text = "version: 1\nname: p\nrules:\n  - {id: c, metric: m, check: {isclose: ref}}\n"
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    steps, values = np.arange(60, dtype=np.int64), np.full(60, 0.5)
    values[5] = 0.9
    ref_values = np.full(60, 0.5)
    ref_values[48] = np.nan
    refs = {"ref": _run(steps.copy(), ref_values)}
    whole = evaluate(policies, _run(steps, values), references=refs).results[0]
    ev = Evaluation(policies)
    for lo in range(0, 60, 10):
        ev.feed({"m": Series("m", steps[lo : lo + 10], values[lo : lo + 10], "train/step")})
    polled = ev.verdict(_run(steps, values), final=True, references=refs).results[0]
    for result in (whole, polled):
        assert (result.status.value, result.step, result.judged) == ("fail", 5, 6)
        assert result.message.startswith("x = 0.9 vs ref 0.5 at step 5")


@pytest.mark.parametrize("block", range(2))
def test_random_template_rules_judge_alike_restored_and_whole(block: int, tmp_path: Path) -> None:
    seeds = range(block * 150, block * 150 + 150)
    judged = sum(_templates_judged_alike(seed, tmp_path) for seed in seeds)
    assert judged >= 120
