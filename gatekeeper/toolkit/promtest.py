"""Generate `promtool test rules` files from gatekeeper policy tests, so the exported
alerts are checked on the same inputs as the policy itself.

For each test case and exported rule, the real engine judges the case; the promtool test
then says the alert stays silent at every point before the step gatekeeper reports (all
points when gatekeeper passes) and fires at that step. Cases the two cannot agree on by
construction are left out with the reason: errors (a missing metric never fires an
alert; but an error at a NaN/Inf point is where the alert fires), gaps under `for: N`
(gatekeeper counts points across a gap, Prometheus restarts `for` at a stale marker),
live and clock-driven cases.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.engine import Evaluation
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.spec import RuleSpec
from gatekeeper.toolkit.export_prom import alert_annotations, alert_labels, duration
from gatekeeper.toolkit.notation import expand
from gatekeeper.toolkit.policytest import build_series, make_run
from gatekeeper.toolkit.promql import Naming, Translation, alert_name, keeps_metric_label
from gatekeeper.toolkit.testfile import Case, LoadedTests
from gatekeeper.verdict import RuleResult, Status

JUDGED = (Status.PASS, Status.WARN, Status.FAIL)


@dataclass
class Generated:
    tests: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def _value_text(v: float | None) -> str:
    if v is None:
        return "stale"  # no value at that time (a `_` would show the previous one)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(v)


def input_series(case: Case, naming: Naming) -> list[dict[str, str]]:
    out = []
    for metric, spec in case.series.items():
        values = expand(spec.values)
        extra = "".join(f', {k}="{v}"' for k, v in naming.selector_labels().items())
        labels = f'{naming.run_label}="{case.run.name}", {naming.metric_label}="{metric}"{extra}'
        steps = [None if v is None else spec.start + i * spec.every for i, v in enumerate(values)]
        out.append(
            {"series": f"{naming.value}{{{labels}}}", "values": " ".join(map(_value_text, values))}
        )
        out.append(
            {"series": f"{naming.step}{{{labels}}}", "values": " ".join(map(_value_text, steps))}
        )
    return out


def _inputs(rule: RuleSpec) -> tuple[str, ...]:
    return rule.expr.metrics if rule.expr is not None else (rule.metric,)


def _nonfinite_error(result: RuleResult) -> bool:
    """An error at a NaN/Inf point: the exported alert fires there, as the gate fails."""
    v = result.value
    return result.status is Status.ERROR and v is not None and not math.isfinite(v)


def _why_not(case: Case, rule: RuleSpec, result: RuleResult) -> str | None:
    if case.live or case.clock is not None:
        return "a live or clock-driven case"
    if _nonfinite_error(result):
        if rule.for_ > 1:
            return "a non-finite value under `for` (gatekeeper errors at once)"
    elif result.status not in JUDGED:
        return f"gatekeeper says {result.status.value} (an alert cannot say error/skip/pending)"
    specs = [case.series[m] for m in _inputs(rule)]
    present = {(s.start, s.every, tuple(v is None for v in expand(s.values))) for s in specs}
    if len(present) > 1:
        # gatekeeper judges a derived metric where all inputs have a point; Prometheus
        # would reuse an input's older value within its lookback
        return "inputs not logged at the same steps"
    if rule.for_ > 1 and any(None in expand(s.values) for s in specs):
        return "gaps under `for` (gatekeeper counts points across a gap)"
    return None


def _checks(
    case: Case, rule: RuleSpec, result: RuleResult, naming: Naming, interval: float
) -> list[dict[str, Any]]:
    spec = case.series[rule.expr.metrics[0] if rule.expr is not None else rule.metric]
    n = len(expand(spec.values))
    fired_at = None
    if result.status is not Status.PASS:
        assert result.step is not None
        fired_at = (result.step - spec.start) // spec.every
    labels = {**alert_labels(rule), **naming.selector_labels(), naming.run_label: case.run.name}
    if keeps_metric_label(rule):
        labels[naming.metric_label] = _inputs(rule)[0]
    firing = [{"exp_labels": labels, "exp_annotations": alert_annotations(rule)}]
    last = n - 1 if fired_at is None else fired_at
    return [
        {
            "eval_time": duration(i * interval),
            "alertname": alert_name(rule),
            "exp_alerts": firing if i == fired_at else [],
        }
        for i in range(last + 1)
    ]


def generate(
    loaded: LoadedTests, translation: Translation, naming: Naming, interval: float
) -> Generated:
    out = Generated()
    exported = {rule.key: rule for rule, _ in translation.exported}
    policies = load_policies(loaded.policy_paths)
    for i, case in enumerate(loaded.spec.tests):
        evaluation = Evaluation(policies)
        series = build_series(case)
        run = make_run(case, loaded.path, series)
        evaluation.feed(series, run)
        verdict = evaluation.verdict(run, final=True)
        checks: list[dict[str, Any]] = []
        for result in verdict.results:
            rule = exported.get(f"{result.policy}/{result.rule}")
            if rule is None:
                continue
            if not set(_inputs(rule)) <= set(case.series):
                continue  # the case does not exercise this rule
            why = _why_not(case, rule, result)
            if why:
                out.left_out.append(f"{loaded.where(i)} {case.name!r} {rule.key}: {why}")
                continue
            checks += _checks(case, rule, result, naming, interval)
        if checks:
            out.tests.append(
                {
                    "name": f"{loaded.where(i)}: {case.name}",
                    "interval": duration(interval),
                    "input_series": input_series(case, naming),
                    "alert_rule_test": checks,
                }
            )
    return out


def test_file(
    tests: list[dict[str, Any]], rules_path: str, tests_path: str, interval: float
) -> dict[str, Any]:
    rel = os.path.relpath(os.path.abspath(rules_path), os.path.dirname(os.path.abspath(tests_path)))
    return {
        "rule_files": [rel],
        "evaluation_interval": duration(interval),
        "tests": tests,
    }
