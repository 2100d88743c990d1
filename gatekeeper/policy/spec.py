"""Loaded policies as the engine sees them: checks parsed, sources (file:line) attached."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gatekeeper.checks import Check
from gatekeeper.policy.conditions import Condition
from gatekeeper.policy.patterns import config_key, is_pattern
from gatekeeper.policy.schema import Match, Reduce, Steps
from gatekeeper.verdict import Mode, Severity

if TYPE_CHECKING:  # imported when a rule has an expression (expr.py)
    from gatekeeper.expr import Expr


@dataclass(frozen=True)
class RuleSpec:
    """One rule as the engine judges it: validated, its policy's defaults and overrides
    applied, `source` the file:line it was declared at."""

    policy: str
    id: str
    metric: str
    steps: Steps
    reduce: Reduce
    check: Check
    severity: Severity
    mode: Mode
    conditions: tuple[Condition, ...]
    source: str  # "file:line" where the rule is declared
    for_: int = 1
    description: str = ""
    off: bool = False
    override: str | None = None  # reason an override gave; shown in every report
    expr: Expr | None = None  # a derived metric; then `metric` is its text
    if_logged: bool = False  # absent metric -> SKIP (not logged by this run), not ERROR
    # `check: {min: config.KEY}`: the bound is read from the run's config when the run is
    # judged (binding.config_bound); until then `check` holds a NaN placeholder
    check_from: str | None = None
    # a rule judged on one metric of a pattern (`eval/*/x`) or named by the run's config
    # (`config.KEY`): the metric as declared; `metric` is then the concrete name
    declared_metric: str | None = None

    @property
    def key(self) -> str:
        return f"{self.policy}/{self.id}"

    @property
    def template(self) -> bool:
        """Whether the rule's metric is a pattern or `config.KEY`, not yet made concrete:
        the engine judges it on the metrics it stands for (engine/expansion.py)."""
        if self.expr is not None or self.declared_metric is not None:
            return False
        return is_pattern(self.metric) or config_key(self.metric) is not None

    def describe_expected(self) -> str:
        bound = self.check.describe()
        value = getattr(self.check, "value", None)
        if self.check_from is not None and isinstance(value, float) and value != value:
            # not bound to a run yet: name the key (`x >= config.k`)
            x, op = getattr(self.check, "_x", "x"), getattr(self.check, "op", "?")
            bound = f"{x} {op} {self.check_from}"
        if self.reduce is not Reduce.NONE:
            bound = f"{self.reduce.value}: {bound}"
        if self.for_ > 1:
            bound += f" (fires after {self.for_} consecutive)"
        return bound


@dataclass(frozen=True)
class PolicySpec:
    """One policy file as the engine uses it: its rules as `RuleSpec`s, `extends` resolved."""

    name: str
    file: str
    mode: Mode = Mode.ENFORCE
    description: str = ""
    match: Match | None = None
    rules: tuple[RuleSpec, ...] = field(default_factory=tuple)
    extends: str | None = None  # resolved path of the base policy file
    requires_config: dict[str, Any] = field(default_factory=dict)  # key -> suggested value
    allow_states: dict[str, str] = field(default_factory=dict)  # run state -> reason
    allow_nothing_judged: str | None = None  # reason the gate may pass judging nothing

    def with_rules(self, rules: tuple[RuleSpec, ...]) -> PolicySpec:
        return replace(self, rules=rules)
