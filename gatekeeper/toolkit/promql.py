"""Translate policy rules into PromQL alert expressions, or say why a rule cannot be.

Prometheus sees one latest value per series, not a run's step history, so only rules
that judge every point as it arrives translate: `max`, `min`, `abs_max`, `between`,
`approx`, `finite`, the strict `lt`, `gt`, `abs_lt`, `strictly_between` (and `for: N`,
`steps: {from, to}`, derived `expr` ratios, `stale`). An `if_logged` rule needs nothing
more: an alert never fires for a metric that is absent, which is its skip.
Every exported expression also fires on NaN/±Inf, as gatekeeper errors on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gatekeeper.checks.approx import Approx
from gatekeeper.checks.base import Check
from gatekeeper.checks.between import Between
from gatekeeper.checks.bound import Bound
from gatekeeper.checks.finite import Finite
from gatekeeper.checks.history import History
from gatekeeper.checks.isclose import IsClose
from gatekeeper.checks.rise import Rise
from gatekeeper.checks.stale import Stale
from gatekeeper.checks.strictly_between import StrictlyBetween
from gatekeeper.errors import PolicyError
from gatekeeper.expr import Node
from gatekeeper.policy.schema import Reduce
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.yamlfile import display_path, read_yaml, to_plain, validation_error


@dataclass(frozen=True)
class Naming:
    """Where Prometheus finds a run's metrics. The default is gatekeeper's own naming:
    `gatekeeper_metric_value{run="...", metric="train/loss"}` (latest value) and
    `gatekeeper_metric_step{...}` (its step); `metrics` maps a metric to any selector of
    its value instead (then step ranges and `stale` need the step series and are not
    exported for it)."""

    value: str = "gatekeeper_metric_value"
    step: str = "gatekeeper_metric_step"
    metric_label: str = "metric"
    run_label: str = "run"
    selector: str = ""  # extra matchers for every selector, e.g. job="trainer"
    metrics: dict[str, str] = field(default_factory=dict)

    def _matchers(self, metric: str) -> str:
        parts = [f'{self.metric_label}="{_escape(metric)}"']
        if self.selector:
            parts.append(self.selector)
        return "{" + ", ".join(parts) + "}"

    def value_of(self, metric: str) -> str:
        return self.metrics.get(metric) or self.value + self._matchers(metric)

    def step_of(self, metric: str) -> str | None:
        return None if metric in self.metrics else self.step + self._matchers(metric)

    def selector_labels(self) -> dict[str, str]:
        """The --selector as labels, for generated test series; only `name="value"`
        matchers describe one label value."""
        out: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in self.selector.split(","))):
            m = re.fullmatch(r'([A-Za-z_][A-Za-z0-9_]*)="([^"\\]*)"', part)
            if m is None:
                raise NotExportable(
                    f'selector matcher {part!r}: generated tests need name="value" matchers'
                )
            out[m.group(1)] = m.group(2)
        return out

    @property
    def on(self) -> str:
        return f"on({self.run_label}, {self.metric_label})"


class NotExportable(Exception):
    """A rule Prometheus cannot evaluate natively; the message says why."""


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _num(x: float) -> str:
    return repr(float(x)).replace("inf", "Inf")


def alert_name(rule: RuleSpec) -> str:
    words = re.split(r"[^A-Za-z0-9]+", f"{rule.policy} {rule.id}")
    return "Gatekeeper" + "".join(w[:1].upper() + w[1:] for w in words if w)


def rule_expr(rule: RuleSpec, naming: Naming) -> str:
    """The PromQL expression that returns a series exactly where the rule is violated."""
    _applicable(rule)
    check = rule.check
    if isinstance(check, Stale):
        return _stale(rule, naming)
    v = _value(rule, naming)
    return _in_steps(rule, naming, f"{v} unless ({_good(check, v)})")


# "Fires unless judged good": a comparison with NaN is false, so NaN and the wrong
# infinity fire too, as gatekeeper errors on them instead of passing.
_GOOD: dict[type[Check], Callable[[Any, str], str]] = {
    Between: lambda c, v: f"{v} >= {_num(c.lo)} and {v} <= {_num(c.hi)}",
    Approx: lambda c, v: f"abs({v} - {_num(c.value)}) <= {_num(c.tolerance)}",
    Finite: lambda c, v: f"abs({v}) < +Inf",
    StrictlyBetween: lambda c, v: f"{v} > {_num(c.lo)} and {v} < {_num(c.hi)}",
}

# Kinds that judge against what Prometheus does not have, and what that is.
_WHY_NOT: dict[type[Check], Callable[[Any], str]] = {
    IsClose: lambda c: (
        f"isclose compares with the same step of an earlier run (--reference "
        f"{c.reference}=RUN), which Prometheus does not have"
    ),
    Rise: lambda c: (
        f"rise compares with the value at step {c.from_step}, which an alert on the "
        "latest value no longer sees"
    ),
    History: lambda c: "history judges against baselines of trusted past runs in a store",
}


def _good(check: Check, v: str) -> str:
    """PromQL that holds where the latest value `v` passes the check."""
    if isinstance(check, Bound):
        return _bound(check, v)
    for cls in type(check).__mro__:
        if cls in _GOOD:
            return _GOOD[cls](check, v)
        if cls in _WHY_NOT:
            raise NotExportable(_WHY_NOT[cls](check))
    raise NotExportable(
        f"check `{check.kind}` judges a window or history of points; Prometheus "
        "sees the latest value per series"
    )


def _bound(check: Bound, v: str) -> str:
    """The bound in PromQL's own comparison (a strict kind's is strict too)."""
    if check.magnitude:
        return f"abs({v}) {check.op} {_num(check.value)}"
    # a signed bound holds for the infinity on its open side: that one must fire too
    finite = f"{v} > -Inf" if check.op.startswith("<") else f"{v} < +Inf"
    return f"{v} {check.op} {_num(check.value)} and {finite}"


def _applicable(rule: RuleSpec) -> None:
    if rule.template:
        raise NotExportable(
            f"metric {rule.metric} stands for the metrics a run names (a pattern or config "
            "key); export a rule per metric"
        )
    if rule.conditions:
        raise NotExportable("`when:` reads run config, which Prometheus does not have")
    if rule.off:
        raise NotExportable(f"switched off by an override ({rule.override})")
    if rule.reduce is not Reduce.NONE:
        raise NotExportable(f"reduce: {rule.reduce.value} needs the whole selection")
    if rule.steps.kind == "every" and rule.steps.period_from:
        raise NotExportable(
            f"steps: {rule.steps.describe()} takes its period from run config, which "
            "Prometheus does not have"
        )
    if rule.steps.kind not in ("all", "range"):
        raise NotExportable(
            f"steps: {rule.steps.describe()} needs particular steps to be present; an alert "
            "cannot tell a missing step from a passing one"
        )


def _value(rule: RuleSpec, naming: Naming) -> str:
    if rule.expr is None:
        return naming.value_of(rule.metric)
    return f"({_node(rule.expr.tree, naming)})"


def _node(node: Node, naming: Naming) -> str:
    if node.op == "num":
        return _num(node.value)
    if node.op == "metric":
        return naming.value_of(node.name)
    args = [_node(a, naming) for a in node.args]
    if node.op == "neg":
        return f"-({args[0]})"
    if node.op in ("+", "-", "*", "/"):
        # Two metrics of one run differ only in the metric label: match on the rest.
        vectors = not any(_scalar(a) for a in node.args)
        op = f"{node.op} ignoring({naming.metric_label})" if vectors else node.op
        return f"({args[0]}) {op} ({args[1]})"
    if node.op in ("abs", "exp"):
        return f"{node.op}({args[0]})"
    if node.op == "log":
        return f"ln({args[0]})"
    raise NotExportable(f"expr function {node.op}() has no elementwise PromQL equivalent")


def keeps_metric_label(rule: RuleSpec) -> bool:
    """Whether the alert carries the metric label: a vector-vector operation drops it."""
    return rule.expr is None or not _joins(rule.expr.tree)


def _joins(node: Node) -> bool:
    if node.op in ("+", "-", "*", "/") and not any(_scalar(a) for a in node.args):
        return True
    return any(_joins(a) for a in node.args)


def _scalar(node: Node) -> bool:
    return node.op == "num" or (node.op != "metric" and all(_scalar(a) for a in node.args))


def _in_steps(rule: RuleSpec, naming: Naming, expr: str) -> str:
    sel = rule.steps
    if sel.kind == "all":
        return expr
    if rule.expr is not None:
        raise NotExportable("steps: {from, to} on a derived expr (its step axis is not exported)")
    step = naming.step_of(rule.metric)
    if step is None:
        raise NotExportable(f"steps: {sel.describe()} needs the step series of {rule.metric}")
    ends = ((">=", sel.start), ("<=", sel.end))
    bounds = [f"{step} {op} {n}" for op, n in ends if n is not None]
    return f"({expr}) and {naming.on} ({' and '.join(bounds)})"


def _stale(rule: RuleSpec, naming: Naming) -> str:
    assert isinstance(rule.check, Stale)
    if rule.expr is not None:
        raise NotExportable("stale on a derived expr")
    step = naming.step_of(rule.metric)
    if step is None:
        raise NotExportable(f"stale needs the step series of {rule.metric}")
    window = f"{int(rule.check.max_seconds)}s"
    # No new step for S seconds, and the run was already logging S seconds ago.
    return f"changes({step}[{window}]) == 0 and {naming.on} ({step} offset {window})"


@dataclass
class Translation:
    exported: list[tuple[RuleSpec, str]] = field(default_factory=list)
    skipped: list[tuple[RuleSpec, str]] = field(default_factory=list)


def translate(policies: list[PolicySpec], naming: Naming) -> Translation:
    out = Translation()
    for policy in policies:
        for rule in policy.rules:
            try:
                if policy.requires_config:
                    raise NotExportable(
                        f"the policy requires config ({', '.join(policy.requires_config)}) to "
                        "pick its variants; run config is not in Prometheus"
                    )
                if policy.match is not None and not naming.selector:
                    raise NotExportable(
                        "the policy's `match:` reads run metadata; give --selector to say "
                        "which series it applies to in Prometheus"
                    )
                out.exported.append((rule, rule_expr(rule, naming)))
            except NotExportable as exc:
                out.skipped.append((rule, str(exc)))
    return out


class _NamingFile(BaseModel):
    """A --mapping file: Naming's fields, all optional."""

    model_config = ConfigDict(extra="forbid")

    value: str = Naming.value
    step: str = Naming.step
    metric_label: str = Naming.metric_label
    run_label: str = Naming.run_label
    selector: str = ""
    metrics: dict[str, str] = Field(default_factory=dict)


def load_naming(path: str | None, selector: str = "") -> Naming:
    """The default naming, or a mapping file's, plus --selector (which wins)."""
    if path is None:
        return Naming(selector=selector)
    tree = read_yaml(path, "mapping")
    try:
        plain = to_plain(tree, display_path(path))
        if plain is not None and not isinstance(plain, dict):  # `[]` was the default naming
            raise PolicyError("a mapping file is a YAML mapping (value, step, metric_label, "
                              "run_label, selector, metrics)", file=display_path(path))
        data = _NamingFile.model_validate(plain or {})
    except ValidationError as exc:
        raise validation_error(exc, tree, display_path(path)) from None
    return Naming(**{**data.model_dump(), "selector": selector or data.selector})
