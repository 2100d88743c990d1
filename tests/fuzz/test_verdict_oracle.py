"""A differential verdict oracle for the threshold rules: random policies on random series,
judged by the engine and by a small plain-Python reading of docs/policy.md's semantics.

Each case (reproducible from its seed: `random.Random(seed)`) is a run of up to five
metrics on three named axes and the plain `step` -- lengths 0..60, steps from 0 or
elsewhere, with gaps, some near +-2**62 and the int64 ends, values from a hostile mix (on
a bound, one ulp either side, +-0.0, 1e300, 1.8e308, 5e-324, NaN, +-Inf), a metric
sometimes absent -- and a policy of 1..4 threshold rules (`max min abs_max between approx
finite lt gt abs_lt strictly_between reach`) with random `steps:` (all, first, last,
[list] incl. steps the run lacks, {from, to}, {last: n}, {every: k, offset}), `reduce:`
(none mean median min max last), `for:`, `severity:`, `if_logged:` and the policy's
`mode:`.

For every case:
1. the engine judging the run whole (`evaluate`) gives each rule the oracle's status (and
   step, where both report one) -- never a PASS where the oracle says FAIL or ERROR;
2. the run fed in random polls (`Evaluation.feed`, a random number of new points of each
   metric per poll; between polls the state sometimes goes through JSON and back, as the
   daemon stores it) gives the same final result, field by field; and no live verdict on
   the way is a FAIL/WARN/ERROR that the final verdict is not (live = final);
3. the gate: exit 1 iff an enforce-mode, fail-severity rule is FAIL or ERROR; else 5 when
   every such rule is SKIP (or there is none: nothing judged), else 0.
A few dozen cases also go through the real CLI (`python -m gatekeeper check`), as miles
records in a JSONL file: exit code and the JSON statuses must agree with the oracle.

`GATEKEEPER_FUZZ_SCALE=10` runs ten times as many cases, `GATEKEEPER_FUZZ_SEED=N` starts
the seeds at N (see tests/fuzz/harness.py). A failure prints the seed, the policy text,
the series and both verdicts; `python -m tests.fuzz.test_verdict_oracle SEED` prints a
case.

The oracle is written from docs/policy.md ("Statuses", "Steps and reductions", "Checks") and
judges in exact arithmetic (`fractions.Fraction`). Where the reference is silent, the engine
was read for the intent, and the choice is written down at the place it matters
("ENGINE READING"). The one deliberate tolerance: a mean, a median and a `reach` window
mean are float sums in the engine, so a value within n ulps of a bound may land either
side of it (see `_rounding_ok`); a NaN or Inf made of finite points is never accepted.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.errors import PolicyError
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import RuleResult, Status
from tests.fuzz.harness import FIRST_SEED, scaled
from tests.helpers import gatekeeper_in_process

# ---- the generator ------------------------------------------------------------------------

INF, NAN = math.inf, math.nan
MAXF = 1.7976931348623157e308
HUGE = [1e300, -1e300, 1e308, -1e308, MAXF, -MAXF, 1e16, -1e16, 1e20]
TINY = [5e-324, -5e-324, 2.2250738585072014e-308, 1e-300]
NONFINITE = [NAN, INF, -INF]
ANCHORS = [0.0, 0.5, 1.0, -1.0, 1e-9, 0.75, 2.0, -0.25, 0.1, 0.3]
# metric -> its step axis; "train/gone" is in policies, never in a run. "d" and "e" are on
# the plain `step` (TensorBoard's and MLflow's): each metric's own counter
METRICS = {
    "train/a": "train/step", "train/b": "train/step", "eval/c": "eval/step",
    "d": "step", "e": "step",
}
ABSENT = "train/gone"
KINDS = [
    "max",
    "min",
    "abs_max",
    "between",
    "approx",
    "finite",
    "lt",
    "gt",
    "abs_lt",
    "strictly_between",
    "reach",
]
REDUCES = ["mean", "median", "min", "max", "last"]
# a float result lies on the subnormal grid: the mean of 0 and -5e-324 is -0.0, not
# -2.5e-324 (below a bound of 0) -- rounding, which every tolerance below allows
SUBNORMAL = Fraction(5e-324)


def _ulp(rng: random.Random, x: float) -> float:
    """x, or one ulp either side of it."""
    return rng.choice([x, x, math.nextafter(x, INF), math.nextafter(x, -INF)])


def gen_steps(rng: random.Random, n: int) -> list[int]:
    shape = rng.choices(["zero", "offset", "gaps", "huge"], weights=[4, 2, 3, 1])[0]
    if shape == "zero":
        return list(range(n))
    if shape == "offset":
        start = rng.randint(-20, 100)
        return list(range(start, start + n))
    if shape == "gaps":
        out, s = [], rng.choice([0, rng.randint(-50, 50)])
        for _ in range(n):
            out.append(s)
            s += rng.choice([1, 1, 1, 2, 3, 5, 10, 1000])
        return out
    # huge: clusters near -2**63, -2**62, 0, 2**62 and 2**63 - 1 (differences wrap int64)
    centres = rng.sample([-(2**63), -(2**62), 0, 2**62, 2**63 - 1], rng.randint(1, 3))
    pool: set[int] = set()
    while len(pool) < n:
        c = rng.choice(centres)
        s = c + rng.randint(-80, 80)  # >= 81 candidates on each side of a centre
        if -(2**63) <= s <= 2**63 - 1:
            pool.add(s)
    return sorted(pool)


def gen_values(rng: random.Random, n: int, hostile: bool) -> list[float]:
    out = []
    spiky = hostile and rng.random() < 0.3  # many huge points: sums overflow and cancel
    for _ in range(n):
        r = rng.random()
        if spiky and r < 0.4:
            out.append(rng.choice(HUGE))
            continue
        if r < 0.35:
            x = round(rng.uniform(-2, 2), rng.choice([1, 2, 6]))
        elif r < 0.65:
            x = _ulp(rng, rng.choice(ANCHORS))
        elif r < 0.72:
            x = rng.choice([0.0, -0.0])
        elif r < 0.82 and hostile:
            x = rng.choice(HUGE)
        elif r < 0.88 and hostile:
            x = rng.choice(TINY)
        elif r < 0.93 and hostile:
            x = rng.choice(NONFINITE)
        else:
            x = rng.uniform(-1, 1)
        out.append(x)
    return out


@dataclass
class Data:
    steps: list[int]
    values: list[float]
    axis: str


@dataclass
class RuleCase:
    id: str
    metric: str
    kind: str
    params: dict[str, Any]  # the check's parameters as Python values
    steps: Any  # the `steps:` selection as Python data (None: omitted, i.e. all)
    reduce: str  # "none" when omitted
    for_: int
    severity: str
    if_logged: bool
    text: str  # the rule as YAML


@dataclass
class Case:
    seed: int
    data: dict[str, Data]
    rules: list[RuleCase]
    mode: str
    chunks: list[dict[str, int]] = field(default_factory=list)  # per poll, new points a metric

    @property
    def policy_text(self) -> str:
        head = "version: 1\nname: oracle\n" + (f"mode: {self.mode}\n" if self.mode else "")
        return head + "rules:\n" + "".join(r.text for r in self.rules)

    def run(self) -> Run:
        return Run(name="r", source="mem", series={m: _series(m, d) for m, d in self.data.items()})

    def describe(self) -> str:
        series = "\n".join(
            f"  {m} on {d.axis}: {list(zip(d.steps, d.values, strict=True))}"
            for m, d in self.data.items()
        )
        return (
            f"seed {self.seed} (python -m tests.fuzz.test_verdict_oracle {self.seed})\n"
            f"--- policy\n{self.policy_text}--- series\n{series or '  (none)'}\n"
            f"--- polls {self.chunks}"
        )


def _series(metric: str, d: Data) -> Series:
    return Series.from_lists(metric, d.steps, d.values, d.axis)


def yfloat(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    return repr(x)


def _pick_bound(rng: random.Random, values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    r = rng.random()
    if finite and r < 0.5:
        return _ulp(rng, rng.choice(finite))
    if r < 0.85:
        return _ulp(rng, rng.choice(ANCHORS))
    if r < 0.95:
        return rng.choice([*HUGE, *TINY, -0.0])
    return rng.choice([INF, -INF])


def _gen_check(rng: random.Random, kind: str, d: Data | None) -> tuple[dict[str, Any], str]:
    values = d.values if d else []
    b = lambda: _pick_bound(rng, values)  # noqa: E731
    if kind in ("max", "min", "lt", "gt"):
        v = b()
        return {"value": v}, f"{{{kind}: {yfloat(v)}}}"
    if kind in ("abs_max", "abs_lt"):
        v = abs(b())
        if kind == "abs_lt" and v == 0:
            v = rng.choice([5e-324, 1.0])
        return {"value": v}, f"{{{kind}: {yfloat(v)}}}"
    if kind in ("between", "strictly_between"):
        lo, hi = sorted([b(), b()])
        if kind == "strictly_between" and not lo < hi:
            hi = math.nextafter(hi, INF) if hi != INF else hi
            lo = lo if lo < hi else -INF
        return {"lo": lo, "hi": hi}, f"{{{kind}: [{yfloat(lo)}, {yfloat(hi)}]}}"
    if kind == "approx":
        v = b()
        if not math.isfinite(v):
            v = rng.choice(ANCHORS)
        rel = rng.choice([0.0, 0.0, 1e-9, 0.1, 0.5, 1.5])
        ab = rng.choice([0.0, 1e-12, 0.1, 1.0, 1e300])
        if rel == 0 and ab == 0:
            ab = 0.25
        parts = [f"value: {yfloat(v)}"] + [f"rel: {yfloat(rel)}"] * (rel != 0 or rng.random() < 0.2)
        parts += [f"abs: {yfloat(ab)}"] * (ab != 0 or rng.random() < 0.2)
        return {"value": v, "rel": rel, "abs": ab}, f"{{approx: {{{', '.join(parts)}}}}}"
    if kind == "finite":
        return {}, "{finite: true}"
    assert kind == "reach"
    v = b()
    if not math.isfinite(v):
        v = rng.choice(ANCHORS)
    steps = d.steps if d else []
    by = rng.choice(steps) if steps and rng.random() < 0.7 else rng.choice([0, 5, 30, 2**62])
    by = max(0, by)
    window = rng.choice([1, 1, 2, 3, 4])
    direction = rng.choice(["up", "down", None])
    parts = [f"value: {yfloat(v)}", f"by_step: {by}"]
    parts += [f"window: {window}"] * (window != 1 or rng.random() < 0.3)
    if direction:
        parts.append(f"direction: {direction}")
    params = {"value": v, "by_step": by, "window": window, "direction": direction or "up"}
    return params, f"{{reach: {{{', '.join(parts)}}}}}"


def _gen_selection(rng: random.Random, d: Data | None) -> tuple[Any, str | None]:
    steps = d.steps if d else []
    some = lambda: rng.choice(steps) if steps else rng.randint(-3, 10)  # noqa: E731
    elsewhere = [-1, 0, 3, 61, 2**62, -(2**62), 2**63 - 1]
    r = rng.random()
    if r < 0.25:
        return None, None
    if r < 0.32:
        return "all", "all"
    if r < 0.40:
        return "first", "first"
    if r < 0.48:
        return "last", "last"
    if r < 0.62:
        chosen = [some() for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            chosen.append(rng.choice(elsewhere))
        return chosen, "[" + ", ".join(map(str, chosen)) + "]"
    if r < 0.76:
        lo = some() if rng.random() < 0.7 else rng.choice(elsewhere)
        hi = some() if rng.random() < 0.7 else rng.choice(elsewhere)
        lo, hi = sorted([lo, hi])
        which = rng.choice(["both", "from", "to"])
        lo = lo if which != "to" else None
        hi = hi if which != "from" else None
        parts = [f"from: {lo}"] * (lo is not None) + [f"to: {hi}"] * (hi is not None)
        return ("range", lo, hi), "{" + ", ".join(parts) + "}"
    if r < 0.86:
        n = rng.choice([1, 2, 3, 5, 10, 70])
        return ("tail", n), f"{{last: {n}}}"
    k = rng.choice([1, 2, 3, 5, 7, 2**61])
    offset = rng.choice([0, 0, rng.randint(0, 8)]) if k < 100 else rng.choice([0, 1])
    text = f"{{every: {k}" + (f", offset: {offset}" if offset or rng.random() < 0.2 else "") + "}"
    return ("every", k, offset), text


def gen_case(seed: int) -> Case:
    rng = random.Random(seed)
    data: dict[str, Data] = {}
    for m, axis in METRICS.items():
        if rng.random() < 0.15:
            continue  # absent from the run
        n = rng.choice([0, 1, 1, 2, 3, 5, 8, 12, 20, 35, 60])
        hostile = rng.random() < 0.5
        data[m] = Data(gen_steps(rng, n), gen_values(rng, n, hostile), axis)
    rules = []
    for i in range(rng.randint(1, 4)):
        metric = rng.choice([*METRICS, *METRICS, ABSENT])
        d = data.get(metric)
        kind = rng.choice(KINDS)
        params, check = _gen_check(rng, kind, d)
        steps, steps_text = _gen_selection(rng, d)
        reduce = "none"
        if kind != "reach" and rng.random() < 0.4:
            reduce = rng.choice(REDUCES)
        for_ = rng.choice([1, 1, 1, 2, 3, 5])
        severity = rng.choice(["fail", "fail", "warn", ""])
        if_logged = rng.random() < 0.2
        parts = [f"id: r{i}", f"metric: {metric}"]
        if steps_text:
            parts.append(f"steps: {steps_text}")
        if reduce != "none" or rng.random() < 0.05:
            parts.append(f"reduce: {reduce}")
        parts.append(f"check: {check}")
        if for_ != 1 or rng.random() < 0.05:
            parts.append(f"for: {for_}")
        if severity:
            parts.append(f"severity: {severity}")
        if if_logged or rng.random() < 0.05:
            parts.append(f"if_logged: {str(if_logged).lower()}")
        text = "  - {" + ", ".join(parts) + "}\n"
        rules.append(
            RuleCase(
                f"r{i}",
                metric,
                kind,
                params,
                steps,
                reduce,
                for_,
                severity or "fail",
                if_logged,
                text,
            )
        )
    mode = rng.choice(["", "", "enforce", "shadow"])
    case = Case(seed, data, rules, mode)
    # polls: each gives every metric a random number of its next points (often none)
    left = {m: len(d.steps) for m, d in data.items()}
    while any(left.values()):
        poll = {}
        for m in left:
            k = min(left[m], rng.choice([0, 1, 1, 2, 3, 7, 20]))
            poll[m] = k
            left[m] -= k
        case.chunks.append(poll)
    return case


# ---- the oracle ---------------------------------------------------------------------------


@dataclass
class Expect:
    status: Status
    step: int | None = None  # compared when not None
    # statuses a float computation may give instead (rounding at a bound; see _rounding_ok)
    also: frozenset[Status] = frozenset()
    why: str = ""
    reduced: Fraction | None = None  # the exact reduction, when a float one may differ
    tolerance: Fraction | None = None


def Q(x: float) -> Fraction | float:
    """A finite float exactly, as a Fraction; +-inf stays a float (Fraction compares with it)."""
    return Fraction(x) if math.isfinite(x) else x


def violates(kind: str, p: dict[str, Any], x: Fraction) -> bool:
    """Does the finite value x break the check? Exact arithmetic, docs/policy.md's table."""
    if kind == "max":
        return not x <= Q(p["value"])
    if kind == "min":
        return not x >= Q(p["value"])
    if kind == "lt":
        return not x < Q(p["value"])
    if kind == "gt":
        return not x > Q(p["value"])
    if kind == "abs_max":
        return not abs(x) <= Q(p["value"])
    if kind == "abs_lt":
        return not abs(x) < Q(p["value"])
    if kind == "between":
        return not Q(p["lo"]) <= x <= Q(p["hi"])
    if kind == "strictly_between":
        return not Q(p["lo"]) < x < Q(p["hi"])
    if kind == "approx":
        v = Fraction(p["value"])
        return not abs(x - v) <= max(Fraction(p["rel"]) * abs(v), Fraction(p["abs"]))
    if kind == "finite":
        return False
    raise AssertionError(kind)


def approx_borderline(p: dict[str, Any], x: Fraction) -> bool:
    """approx is |x - v| <= max(r|v|, a) in floats in the engine: each side rounded once
    or twice, so within a few ulps of equality either answer is a faithful reading. (Only
    rounding: a side that overflows to Inf is not borderline.)"""
    v = Fraction(p["value"])
    d, t = abs(x - v), max(Fraction(p["rel"]) * abs(v), Fraction(p["abs"]))
    big = max(d, t)
    return big < Fraction(MAXF) and abs(d - t) <= big * Fraction(1, 2**49) + SUBNORMAL


def select(rule: RuleCase, d: Data) -> tuple[list[tuple[int, float]], list[int]]:
    """The selected points (step order) and the listed steps that are missing."""
    pts = list(zip(d.steps, d.values, strict=True))
    sel = rule.steps
    if sel is None or sel == "all":
        return pts, []
    if sel == "first":
        return pts[:1], []
    if sel == "last":
        return pts[-1:], []
    if isinstance(sel, list):
        want = set(sel)
        have = {s for s, _ in pts}
        return [p for p in pts if p[0] in want], sorted(want - have)
    if sel[0] == "range":
        _, lo, hi = sel
        return [p for p in pts if (lo is None or p[0] >= lo) and (hi is None or p[0] <= hi)], []
    if sel[0] == "tail":
        return pts[-sel[1] :], []
    if sel[0] == "every":
        # ENGINE READING: `step % k == offset` with Python's (floor) modulo, as numpy's
        # int64 % is: step -3 with every 2 is 1 (mod 2), so offset 1 selects it.
        _, k, offset = sel
        return [p for p in pts if p[0] % k == offset], []
    raise AssertionError(sel)


def exact_reduce(how: str, xs: list[Fraction]) -> Fraction:
    if how == "mean":
        return sum(xs, Fraction(0)) / len(xs)
    if how == "median":
        s = sorted(xs)
        mid = len(s) // 2
        return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    if how == "min":
        return min(xs)
    if how == "max":
        return max(xs)
    if how == "last":
        return xs[-1]
    raise AssertionError(how)


def stale(rule: RuleCase, d: Data, case: Case) -> bool:
    """docs/policy.md (A `last` point that is stale): `last`/`{last: n}` judge the run's end, so a
    metric whose last point lies further before the last step of its named axis (any
    metric on that axis) than its own widest step gap (at least 1) is an error: its last
    value is not the run's. On the plain `step` each metric counts its own steps (epochs
    next to batches): judged on its own points, never stale."""
    tail = rule.steps == "last" or (isinstance(rule.steps, tuple) and rule.steps[0] == "tail")
    if not tail or d.axis == "step":
        return False
    axis_last = max(x.steps[-1] for x in case.data.values() if x.axis == d.axis and x.steps)
    gap = max([1, *(b - a for a, b in zip(d.steps, d.steps[1:], strict=False))])
    return axis_last - d.steps[-1] > gap


def oracle(rule: RuleCase, case: Case) -> Expect:
    """The final verdict on one rule, from docs/policy.md; `Status.FAIL` before severity."""
    d = case.data.get(rule.metric)
    if d is None:
        if rule.if_logged:
            return Expect(Status.SKIP, why="metric not logged, if_logged")
        return Expect(Status.ERROR, why="metric missing")
    if not d.steps:
        # ENGINE READING: a metric the run names but with no points is an error even with
        # if_logged (the run "logs" it; if_logged skips only a metric the run lacks).
        return Expect(Status.ERROR, why="metric has no points")
    selected, missing = select(rule, d)
    if stale(rule, d, case):
        return Expect(Status.ERROR, step=d.steps[-1], why="metric stopped before the run")
    # ENGINE READING on precedence, where docs/policy.md lists several errors at once: a
    # non-finite point inside a reduction is the error (one value of the whole selection);
    # judged point by point, the first event in step order (below); a violation is
    # reported over a missing listed step.
    if rule.reduce != "none":
        if missing:
            return Expect(Status.ERROR, why=f"listed steps {missing} missing")
        if not selected:
            return Expect(Status.ERROR, why="no points selected")
        bad = [s for s, x in selected if not math.isfinite(x)]
        if bad:
            return Expect(Status.ERROR, step=bad[0], why="non-finite inside the reduction")
        xs = [Fraction(x) for _, x in selected]
        r = exact_reduce(rule.reduce, xs)
        # ENGINE READING: `for:` counts consecutive violating points; a reduction is one
        # value, so it fails at once whatever `for` says.
        status = Status.FAIL if violates(rule.kind, rule.params, r) else Status.PASS
        exp = Expect(status, why=f"{rule.reduce} = {float(r)!r}")
        if rule.reduce in ("mean", "median"):
            exp.reduced = r
            exp.tolerance = len(xs) * max(abs(x) for x in xs) * Fraction(1, 2**52) + SUBNORMAL
        elif rule.kind == "approx" and approx_borderline(rule.params, r):
            exp.also = frozenset({Status.PASS, Status.FAIL})
        return exp
    bad = [s for s, x in selected if not math.isfinite(x)]
    if bad:
        return first_in_step_order(rule, selected, bad[0])
    if rule.kind == "reach":
        if missing:
            return Expect(Status.ERROR, why=f"listed steps {missing} missing")
        if not selected:
            return Expect(Status.ERROR, why="no points selected")
        return reach_oracle(rule, selected)
    exact = pointwise(rule, selected, missing, None)
    if not exact.why.startswith("borderline"):
        return exact
    # a borderline approx point: either reading of it is faithful, and the outcome of each
    # may differ in more than pass/fail (no violation, then a missing step is an error)
    alts = {pointwise(rule, selected, missing, b).status for b in (False, True)}
    also = frozenset(alts - {exact.status})
    return Expect(exact.status, also=also, why=exact.why)  # the step may move, too


def first_in_step_order(rule: RuleCase, selected: list[tuple[int, float]], nan: int) -> Expect:
    """docs/policy.md (Statuses): judged point by point, the first non-finite point ends judging,
    and the first violation in step order is reported: a `for` that fires at a point
    before it is a FAIL there (naming the non-finite point too), else an ERROR at it.
    `reach` is judged on the whole selection: a non-finite point anywhere is its ERROR."""
    error = Expect(Status.ERROR, step=nan, why="non-finite at a judged point")
    if rule.kind == "reach":
        return error
    before = [p for p in selected if p[0] < nan]
    outcomes = {pointwise(rule, before, [], b).status for b in (None, False, True)}
    exact = pointwise(rule, before, [], None)
    if exact.status is Status.FAIL:
        also = frozenset({Status.ERROR} if outcomes != {Status.FAIL} else set())
        step = None if exact.why.startswith("borderline") else exact.step  # it may move
        return Expect(Status.FAIL, step=step, also=also, why=f"{exact.why} before the NaN")
    if Status.FAIL in outcomes:  # a borderline approx point may fire `for` before it
        return Expect(Status.ERROR, also=frozenset({Status.FAIL}), why=error.why)
    return error


def pointwise(
    rule: RuleCase, selected: list[tuple[int, float]], missing: list[int], borderline: bool | None
) -> Expect:
    """Every selected (finite) point judged; FAIL at the first point that ends `for`
    consecutive violations. `borderline`: how an approx point within rounding of its
    bound is read (None: exactly; the Expect's `why` then starts "borderline")."""
    run, seen = 0, False
    for s, x in selected:
        q = Fraction(x)
        bad = violates(rule.kind, rule.params, q)
        if rule.kind == "approx" and approx_borderline(rule.params, q):
            seen = True
            bad = bad if borderline is None else borderline
        run = run + 1 if bad else 0
        if run >= rule.for_:
            return Expect(Status.FAIL, step=s, why=_why(seen, f"{run} consecutive violations"))
    if missing:
        return Expect(Status.ERROR, why=_why(seen, f"listed steps {missing} missing"))
    if not selected:
        return Expect(Status.ERROR, why="no points selected")
    return Expect(Status.PASS, step=selected[-1][0], why=_why(seen, "no violation"))


def _why(borderline: bool, why: str) -> str:
    return f"borderline approx point; {why}" if borderline else why


def reach_oracle(rule: RuleCase, selected: list[tuple[int, float]]) -> Expect:
    """`reach`: the k-point rolling mean of the selected points at steps <= by_step gets
    to v (>= up, <= down) at some point; the first window that does is the PASS step.
    ENGINE READING: fewer than k points by the deadline (or none) is an error, not a fail;
    a non-finite selected point anywhere, even after by_step, is an error (handled above);
    a run whose last selected point is before by_step and that never got there is a skip."""
    p = rule.params
    pts = [(s, Fraction(x)) for s, x in selected if s <= p["by_step"]]
    k, v = p["window"], Fraction(p["value"])
    if not selected:
        return Expect(Status.ERROR, why="no points")
    ambiguous = False
    for i in range(k - 1, len(pts)):
        window = [x for _, x in pts[i - k + 1 : i + 1]]
        mean = sum(window, Fraction(0)) / k
        slack = k * max(abs(x) for x in window) * Fraction(1, 2**52) + SUBNORMAL
        if k > 1 and abs(mean - v) <= slack:
            ambiguous = True  # a float window mean may land either side of v
        if (mean >= v) if p["direction"] == "up" else (mean <= v):
            also = frozenset({Status.FAIL}) if ambiguous else frozenset()
            return Expect(
                Status.PASS,
                step=None if ambiguous else pts[i][0],
                also=also,
                why=f"reached at {pts[i][0]}",
            )
    also = frozenset({Status.PASS}) if ambiguous else frozenset()
    if max(s for s, _ in selected) < p["by_step"]:
        return Expect(Status.SKIP, also=also, why="the run ended before by_step")
    if not pts:
        return Expect(Status.ERROR, why="no points by by_step")
    if len(pts) < k:
        return Expect(Status.ERROR, why="fewer than window points")
    return Expect(Status.FAIL, also=also, why="never reached")


def _rounding_ok(rule: RuleCase, exp: Expect, got: RuleResult) -> bool:
    """A mean or median the engine computed in floats: its value within n ulps (of the
    largest point) of the exact one, and its status what the check says of that value.
    An Inf or NaN from finite points is never within."""
    if exp.reduced is None or got.value is None or not math.isfinite(got.value):
        return False
    assert exp.tolerance is not None
    e = Fraction(got.value)
    if abs(e - exp.reduced) > exp.tolerance:
        return False
    if rule.kind == "approx" and approx_borderline(rule.params, e):
        return True  # approx's own rounding at the bound (|1e300 - -1| <= 1e300 in floats)
    status = Status.FAIL if violates(rule.kind, rule.params, e) else Status.PASS
    return _shown(status, rule) is got.status


def _shown(status: Status, rule: RuleCase) -> Status:
    return Status.WARN if status is Status.FAIL and rule.severity == "warn" else status


# ---- the comparison -----------------------------------------------------------------------


def _key(r: RuleResult) -> tuple[Any, ...]:
    return (r.status, r.step, repr(r.value), r.message, r.violations, r.judged)


def _fed(case: Case, policies: list[Any]) -> tuple[list[RuleResult], list[str]]:
    """The run fed poll by poll; the final results, and every live verdict that stopped a
    rule (FAIL/WARN/ERROR) as text, to hold against the final verdict."""
    ev = Evaluation(policies)
    rng = random.Random(case.seed)
    at = {m: 0 for m in case.data}
    seen: dict[str, Series] = {}
    live: list[str] = []
    for poll in case.chunks:
        new = {}
        for m, k in poll.items():
            d = case.data[m]
            lo, hi = at[m], at[m] + k
            at[m] = hi
            new[m] = Series.from_lists(m, d.steps[lo:hi], d.values[lo:hi], d.axis)
            seen[m] = Series.empty(m, d.axis)
        ev.feed(new)
        if rng.random() < 0.3:  # the daemon saves the state as JSON and restores it
            ev = Evaluation.from_state(
                policies, json.loads(json.dumps(ev.to_state(), allow_nan=False))
            )
        run = Run(name="r", source="mem", series=dict(seen))
        for r in ev.verdict(run, final=False).results:
            if r.status in (Status.FAIL, Status.WARN, Status.ERROR):
                live.append(f"{r.rule}:{r.status.value}:{r.step}")
    # metrics with no points at all are named by the final poll's run, as a source would
    final = ev.verdict(case.run(), final=True).results
    return final, live


def _valid(case: Case) -> bool:
    """A bound that is not a finite number is refused when the policy loads (exit 2)."""
    return all(
        math.isfinite(v) for r in case.rules for v in r.params.values() if isinstance(v, float)
    )


def check_case(case: Case, tmp_path: Path) -> tuple[int, int]:
    """Judge one case every way; AssertionError with the whole case on a disagreement.
    Returns (rules judged, rounding-ambiguous ones accepted)."""
    path = tmp_path / "oracle.yaml"
    path.write_text(case.policy_text)
    valid = _valid(case)
    try:
        policies = load_policies([str(path)])
    except PolicyError as exc:
        if valid:
            raise AssertionError(f"{case.describe()}\nvalid policy refused: {exc}") from None
        return 0, 0
    if not valid:
        raise AssertionError(f"{case.describe()}\na non-finite bound was accepted")
    run = case.run()
    verdict = evaluate(policies, run, final=True)
    whole = [r for r in verdict.results if r.policy == "oracle"]
    fed, live = _fed(case, policies)
    fed = [r for r in fed if r.policy == "oracle"]
    loose = 0
    problems = []
    for rule, got, again in zip(case.rules, whole, fed, strict=True):
        exp = oracle(rule, case)
        shown = _shown(exp.status, rule)
        ok = got.status is shown
        if not ok and got.status in {_shown(s, rule) for s in exp.also}:
            ok, loose = True, loose + 1
        if not ok and _rounding_ok(rule, exp, got):
            ok, loose = True, loose + 1
        if ok and got.status is shown and exp.step is not None and got.step != exp.step:
            ok = False
        if not ok:
            silent = got.status is Status.PASS and exp.status in (Status.FAIL, Status.ERROR)
            problems.append(
                f"{rule.id}: engine {got.status.value} at step {got.step} "
                f"(value {got.value!r}): {got.message}\n    oracle {shown.value} at step "
                f"{exp.step}: {exp.why}" + ("\n    ** SILENT PASS **" if silent else "")
            )
        if _key(again) != _key(got):
            problems.append(f"{rule.id}: fed in polls {_key(again)} != whole {_key(got)}")
    # A live FAIL/WARN/ERROR is final in kind: the final verdict is not better. ENGINE
    # READING: it may be another of the same kind -- a live ERROR "too few points by
    # by_step" may end as the ERROR of a later NaN -- both fail the gate alike.
    kind = {Status.FAIL: "stop", Status.ERROR: "stop", Status.WARN: "warn"}
    by_rule = {r.rule: r for r in whole}
    for stopped in live:
        rid, status, step = stopped.split(":")
        final = by_rule[rid]
        same = (final.status.value, str(final.step)) == (status, step)
        if (
            not same
            and kind.get(Status(status)) != kind.get(final.status)
            and not (status == "warn" and final.status is Status.ERROR)
        ):
            problems.append(
                f"{rid}: live {status} at step {step}, final {final.status.value} "
                f"at step {final.step}: {final.message}"
            )
    gating = [
        r
        for r, rule in zip(whole, case.rules, strict=True)
        if case.mode != "shadow"
        and rule.severity == "fail"
        and r.status in (Status.FAIL, Status.ERROR)
    ]
    judged = any(
        case.mode != "shadow" and rule.severity == "fail" and r.status is not Status.SKIP
        for r, rule in zip(whole, case.rules, strict=True)
    )
    want = 1 if gating else 0 if judged else 5
    if verdict.exit_code != want or any(r.gating != (r in gating) for r in whole):
        problems.append(f"gate: exit {verdict.exit_code}, gating rules {[r.rule for r in gating]}")
    if problems:
        raise AssertionError(case.describe() + "\n--- disagreements\n" + "\n".join(problems))
    return len(whole), loose


N_CASES = 2500
N_CLI = 30


def test_verdicts_agree_with_the_oracle(tmp_path: Path) -> None:
    rules = loose = 0
    statuses: dict[Status, int] = {}
    for seed in range(FIRST_SEED, FIRST_SEED + scaled(N_CASES)):
        case = gen_case(seed)
        n, k = check_case(case, tmp_path)
        rules, loose = rules + n, loose + k
        for rule in case.rules:
            s = oracle(rule, case).status
            statuses[s] = statuses.get(s, 0) + 1
    # the generator reaches every outcome, and rounding leeway stays rare
    assert all(
        statuses.get(s, 0) > scaled(N_CASES) // 100
        for s in (Status.PASS, Status.FAIL, Status.ERROR, Status.SKIP)
    ), statuses
    assert loose < rules // 50, (loose, rules)


# ---- through the CLI ----------------------------------------------------------------------


def _marker(x: float, rng: random.Random) -> Any:
    if math.isnan(x):
        return None if rng.random() < 0.3 else "NaN"  # a null value is a non-finite point
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def cli_case(case: Case, tmp_path: Path) -> None:
    rng = random.Random(case.seed)
    run_file, policy_file, out = (tmp_path / n for n in ("run.jsonl", "p.yaml", "out.json"))
    lines = [
        json.dumps(
            {
                "metric": m,
                "step_key": d.axis,
                "series": [[s, _marker(x, rng)] for s, x in zip(d.steps, d.values, strict=True)],
            }
        )
        for m, d in case.data.items()
    ]
    run_file.write_text("".join(line + "\n" for line in lines))
    policy_file.write_text(case.policy_text)
    # the console script's main() in this process: 30 children proved nothing more
    proc = gatekeeper_in_process(
        "check", str(run_file), "-p", str(policy_file), "--json", str(out), "-q"
    )
    where = f"{case.describe()}\n--- cli exit {proc.returncode}: {proc.stderr}"
    if not _valid(case):  # refused: exit 2, one line naming the policy file
        assert proc.returncode == 2 and "p.yaml:" in proc.stderr, where
        return
    assert proc.returncode in (0, 1, 5), where
    got = {r["rule"]: r for r in json.loads(out.read_text())["results"]}
    gating = judged = False
    for rule in case.rules:
        exp, r = oracle(rule, case), got[rule.id]
        status = Status(r["status"])
        value = float(r["value"]) if type(r["value"]) in (int, float) else None
        seen = SimpleNamespace(status=status, value=value)
        assert (
            status is _shown(exp.status, rule)
            or status in {_shown(s, rule) for s in exp.also}
            or _rounding_ok(rule, exp, seen)  # type: ignore[arg-type]
        ), f"{where}\n{rule.id}: cli {status.value} ({r['message']}), oracle {exp.status.value}"
        gating |= rule.severity == "fail" and status in (Status.FAIL, Status.ERROR)
        judged |= rule.severity == "fail" and status is not Status.SKIP
    enforced = case.mode != "shadow"
    want = 1 if gating and enforced else 0 if judged and enforced else 5
    assert proc.returncode == want, where


def test_cli_verdicts_agree_with_the_oracle(tmp_path: Path) -> None:
    for seed in range(FIRST_SEED + 10**6, FIRST_SEED + 10**6 + scaled(N_CLI)):
        case = gen_case(seed)
        cli_case(case, tmp_path)


if __name__ == "__main__":  # print a case: python -m tests.fuzz.test_verdict_oracle SEED
    c = gen_case(int(sys.argv[1]))
    print(c.describe())
    for rc in c.rules:
        print(rc.id, oracle(rc, c))
