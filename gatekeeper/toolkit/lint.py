"""`gatekeeper lint`: what `validate` cannot see — rules that can never fail, never pass
or never apply, rules shadowed by a stricter twin, and (given example runs) thresholds
far outside anything those runs logged and rules on metrics they never logged.

Pure: takes loaded policies and runs, returns findings; the command prints them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gatekeeper.checks.abs_lt import AbsLt
from gatekeeper.checks.abs_max import AbsMax
from gatekeeper.checks.approx import Approx
from gatekeeper.checks.between import Between
from gatekeeper.checks.fraction import Fraction
from gatekeeper.checks.gt import Gt
from gatekeeper.checks.lt import Lt
from gatekeeper.checks.max import Max
from gatekeeper.checks.min import Min
from gatekeeper.checks.reach import Reach
from gatekeeper.checks.rise import Rise
from gatekeeper.checks.strictly_between import StrictlyBetween
from gatekeeper.engine.applicability import policy_mismatch  # the engine's test of `match:`
from gatekeeper.fmt import fmt
from gatekeeper.model import Run
from gatekeeper.policy.conditions import first_failing
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.toolkit.lintcodes import Finding
from gatekeeper.verdict import Severity

FAR = 100.0  # a bound this many times the largest |value| logged is "far outside"


@dataclass(frozen=True)
class Span:
    """The values a point-by-point bound check passes: lo..hi, each end open (strict:
    `lt`, `gt`, `abs_lt`, `strictly_between`) or closed."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def empty(self) -> bool:
        return self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open))

    def within(self, other: Span) -> bool:
        """Every value this span passes, `other` passes too."""
        lo_ok = self.lo > other.lo or (self.lo == other.lo and (self.lo_open or not other.lo_open))
        hi_ok = self.hi < other.hi or (self.hi == other.hi and (self.hi_open or not other.hi_open))
        return lo_ok and hi_ok

    def below(self, x: float) -> bool:
        """Every value this span passes is below x (x itself fails)."""
        return self.hi < x or (self.hi == x and self.hi_open)

    def above(self, x: float) -> bool:
        return self.lo > x or (self.lo == x and self.lo_open)


def interval(rule: RuleSpec) -> Span | None:
    """The values a point-by-point bound check passes; None for other kinds."""
    c = rule.check
    if isinstance(c, Max):
        return Span(-math.inf, c.value)
    if isinstance(c, Min):
        return Span(c.value, math.inf)
    if isinstance(c, AbsMax):
        return Span(-c.value, c.value)
    if isinstance(c, Between):
        return Span(c.lo, c.hi)
    if isinstance(c, Approx):
        return Span(c.value - c.tolerance, c.value + c.tolerance)
    if isinstance(c, Lt):
        return Span(-math.inf, c.value, hi_open=True)
    if isinstance(c, Gt):
        return Span(c.value, math.inf, lo_open=True)
    if isinstance(c, AbsLt):
        return Span(-c.value, c.value, lo_open=True, hi_open=True)
    if isinstance(c, StrictlyBetween):
        return Span(c.lo, c.hi, lo_open=True, hi_open=True)
    return None


def _first_step(rule: RuleSpec) -> int | None:
    sel = rule.steps
    if sel.kind == "list":
        return min(sel.steps)
    if sel.kind == "range":
        return sel.start
    if sel.kind == "every":
        return sel.offset  # step % n == offset: the first such step is the offset itself
    return None


def static_findings(rule: RuleSpec) -> Iterator[tuple[str, str]]:
    """(kind, message) for what the rule itself says, without any run."""
    span = interval(rule)
    if span is not None and span.lo == -math.inf and span.hi == math.inf:
        yield "never-fails", f"{rule.check.describe()} holds for every finite value"
    if span is not None and span.empty():
        yield "never-passes", f"{rule.check.describe()} holds for no value"
    elif span is not None and span.lo == span.hi and span.lo != 0:
        # Exactly 0 is a value a metric reaches: a rate or count of no events (miles' TITO
        # mismatch rates `== 0`). Exactly 0.3 is not, for a measured float.
        yield "never-passes", f"{rule.check.describe()} passes only x == {fmt(span.lo)} exactly"
    c = rule.check
    if isinstance(c, Fraction) and (c.max is None or c.max >= 1) and (c.min is None or c.min <= 0):
        yield "never-fails", f"{c.describe()}: every share is within that"
    if isinstance(c, Reach):
        first = _first_step(rule)
        if first is not None and c.by_step < first:
            yield (
                "never-passes",
                (
                    f"reach deadline step {c.by_step} is before the first selected step {first} "
                    f"(steps {rule.steps.describe()})"
                ),
            )
    if isinstance(c, Rise):
        first = _first_step(rule)
        if first is not None and first > c.from_step:
            yield (
                "never-passes",
                (
                    f"rise from step {c.from_step}, which steps {rule.steps.describe()} do not "
                    "select: there is never a value to rise from"
                ),
            )
    if rule.for_ > 1 and rule.reduce.value == "none":
        most = _max_points(rule)
        if most is not None and most < rule.for_:
            yield (
                "never-fails",
                (
                    f"for: {rule.for_} needs {rule.for_} consecutive points, steps "
                    f"{rule.steps.describe()} select at most {most}"
                ),
            )
    yield from _conditions(rule)


def _max_points(rule: RuleSpec) -> int | None:
    sel = rule.steps
    if sel.kind == "list":
        return len(sel.steps)
    if sel.kind in ("first", "last"):
        return 1
    if sel.kind == "tail":
        return sel.count
    if sel.kind == "range" and sel.start is not None and sel.end is not None:
        return sel.end - sel.start + 1
    return None


def _conditions(rule: RuleSpec) -> Iterator[tuple[str, str]]:
    """Numeric `when` bounds on one key that no value can meet at once."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for c in rule.conditions:
        if not isinstance(c.operand, (int, float)) or isinstance(c.operand, bool):
            continue
        v = float(c.operand)
        if c.op in ("gt", "ge", "eq"):
            lo[c.key] = max(lo.get(c.key, -math.inf), v)
        if c.op in ("lt", "le", "eq"):
            hi[c.key] = min(hi.get(c.key, math.inf), v)
    for key in lo.keys() & hi.keys():
        strict = any(c.key == key and c.op in ("gt", "lt") for c in rule.conditions)
        if lo[key] > hi[key] or (strict and lo[key] == hi[key]):
            yield "never-applies", f"when: no value of {key} meets all of its conditions"


def shadowed(rules: list[RuleSpec], policies: dict[str, PolicySpec]) -> Iterator[Finding]:
    """A rule whose every failure is also a failure of a stricter rule on the same points."""

    def key(r: RuleSpec) -> tuple[object, ...]:
        p = policies[r.policy]
        # requires_config too: a policy that errors without config keys is not "failing
        # whenever" one that is judged without them.
        required = tuple(sorted(p.requires_config))
        return (r.metric, r.steps, r.reduce, r.for_, r.conditions, p.match, required)

    bounded = [(r, interval(r)) for r in rules if interval(r) is not None and not r.off]
    for r, span in bounded:
        for other, o in bounded:
            if other is r or key(other) != key(r) or span is None or o is None:
                continue
            inside = o.within(span)  # other passes less than r
            same = span == o
            if inside and _rank(other) >= _rank(r) and not (same and other.source > r.source):
                what = "duplicates" if same else "is shadowed by"
                yield Finding(
                    r.source,
                    r.key,
                    "shadowed",
                    f"{what} {other.key} ({other.source}): {other.check.describe()} fails whenever "
                    f"{r.check.describe()} does, at the same or higher severity",
                )
                break


def _rank(r: RuleSpec) -> int:
    return 2 if r.severity is Severity.FAIL and r.mode.value == "enforce" else 1


def against_runs(
    rule: RuleSpec, runs: list[Run], policy: PolicySpec | None = None
) -> Iterator[tuple[str, str]]:
    """Thresholds compared with what the example runs logged; rules they never feed (on
    the runs the rule applies to: its policy's `match:` and its `when:` hold)."""
    inputs = rule.expr.metrics if rule.expr is not None else (rule.metric,)
    absent = [m for m in inputs if not any(m in run.series and len(run.series[m]) for run in runs)]
    if absent:
        applies = [run for run in runs if _applies(rule, policy, run)]
        if applies:
            yield "not-logged", _not_logged(rule, absent, len(applies))
        return
    span = interval(rule)
    if span is None or rule.expr is not None:
        return
    values = np.concatenate([run.series[rule.metric].values for run in runs])
    values = values[np.isfinite(values)]
    if not values.size:
        return
    lo, hi, scale = float(values.min()), float(values.max()), float(np.abs(values).max())
    yield from _far(rule, span, lo, hi, scale, len(runs))


def _applies(rule: RuleSpec, policy: PolicySpec | None, run: Run) -> bool:
    """The engine judges `rule` on `run` (not skipped by `match:` or `when:`)."""
    mismatch = policy_mismatch(policy, run) if policy is not None else None
    return mismatch is None and first_failing(list(rule.conditions), run) is None


def _not_logged(rule: RuleSpec, absent: list[str], n: int) -> str:
    """What a rule on metrics no example run logged would do: a typo in a fail rule's
    metric fails every run; in a warn (or shadow) rule it is noise nobody acts on."""
    gates = _rank(rule) == 2
    if rule.if_logged:
        outcome = "it would only ever be skipped (if_logged): it never judges anything"
    elif gates:
        outcome = (
            "it would fail the gate on every one of them (a metric never logged is an "
            "error); check the metric name"
        )
    else:
        outcome = "it would only ever show as an error nobody gates on"
    what = "fail" if gates else "warn" if rule.severity is Severity.WARN else "shadow-mode"
    logged = f"which none of the {n} example runs logged"
    return f"{what} rule on {', '.join(absent)}, {logged}: {outcome}"


def _far(
    rule: RuleSpec, span: Span, lo: float, hi: float, scale: float, n: int
) -> Iterator[tuple[str, str]]:
    logged = f"the {n} example runs logged {fmt(lo)}..{fmt(hi)}"
    if span.below(lo) or span.above(hi):
        yield "fails-examples", f"{rule.check.describe()} fails every point; {logged}"
        return
    for bound in (span.lo, span.hi):
        if math.isfinite(bound) and scale > 0 and abs(bound) > FAR * scale:
            yield (
                "far-threshold",
                (
                    f"bound {fmt(bound)} is {fmt(abs(bound) / scale)}x the largest |value| logged; "
                    f"{logged} — it would catch nothing short of a {FAR:g}x blow-up"
                ),
            )


def lint(policies: list[PolicySpec], runs: list[Run]) -> list[Finding]:
    rules = [r for p in policies for r in p.rules]
    by_name = {p.name: p for p in policies}
    out: list[Finding] = []
    for r in rules:
        out += [Finding(r.source, r.key, k, m) for k, m in static_findings(r)]
        if runs:
            found = against_runs(r, runs, by_name.get(r.policy))
            out += [Finding(r.source, r.key, k, m) for k, m in found]
    out += list(shadowed(rules, {p.name: p for p in policies}))
    return sorted(out, key=lambda f: (f.source.rsplit(":", 1)[0], _line(f.source), f.kind))


def _line(source: str) -> int:
    tail = source.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0
