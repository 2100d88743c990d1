"""Template rules made concrete: a rule whose metric is a pattern (`eval/*/x`) becomes one
rule per metric of the run it matches (id `rule[metric]`, each judged and reported on its
own), and a rule whose metric is `config.KEY` becomes the rule on the metric the run's
config names (its id unchanged). The checks are the engine's own: a made rule is an
ordinary RuleSpec with a concrete metric, tracked like any other (engine/__init__.py).

A pattern is tried on each metric name once, when its first points are fed, so a metric
that appears late is judged from its first point, live as whole. A template that stands
for no metric stays in the verdict itself: pending live, at the end an error naming the
pattern or key (a skip when `if_logged`, or when the source cannot carry such a metric)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gatekeeper.model import Run
from gatekeeper.policy.patterns import config_key, expanded_id, is_pattern, matches
from gatekeeper.policy.spec import RuleSpec


def concrete(template: RuleSpec, metric: str) -> RuleSpec:
    """The template rule on one metric."""
    rule_id = expanded_id(template.id, metric) if is_pattern(template.metric) else template.id
    return replace(template, id=rule_id, metric=metric, declared_metric=template.metric)


def config_metric(rule: RuleSpec, run: Run) -> str:
    """The metric name the run's config gives a `metric: config.KEY` rule, or why none
    (raised as ValueError: the caller makes it the rule's error)."""
    metric = named_metric(rule, run)
    if metric is not None:
        return metric
    key = config_key(rule.metric)
    found, value = run.lookup(rule.metric)
    if not found or value is None:
        raise ValueError(
            f"run config does not set {key}, which rule {rule.key} reads for its metric; give "
            f"the run's value, e.g. --config {key}=... (or \"config\" in run.json)"
        )
    raise ValueError(f"config {key} is {value!r}; rule {rule.key} needs a metric name there")


def named_metric(rule: RuleSpec, run: Run) -> str | None:
    """The metric name the run's config gives a `metric: config.KEY` rule: a string that
    is not empty, else None (`config_metric` says why). Asked on every poll: no error
    is made for a run that names none."""
    found, value = run.lookup(rule.metric)
    return value if found and isinstance(value, str) and value else None


class Templates:
    """Which template rules stand for which metrics so far."""

    def __init__(self, rules: Iterable[RuleSpec]):
        self.patterns = [r for r in rules if r.template and is_pattern(r.metric)]
        self.configs = [r for r in rules if r.template and not is_pattern(r.metric)]
        self.tried: set[str] = set()  # metric names fed (each tried on the patterns once)
        # restored from a state that did not keep `tried` (saved before it was): any
        # metric may have been fed before, so a config naming one is taken as late
        self.unknown = False
        self._sorted: list[str] = []  # `tried` as saved, sorted again only when it grew

    def new_metrics(self, names: Iterable[str]) -> list[tuple[RuleSpec, str]]:
        """(template, metric) for each not yet tried name a pattern matches."""
        out = []
        for name in names:
            if name in self.tried:
                continue
            self.tried.add(name)
            out += [(t, name) for t in self.patterns if matches(t.metric, name)]
        return out

    def saved(self) -> list[str]:
        """`tried` as the state keeps it: sorted (a row is the same whatever the order
        the names came in); sorted again only when it grew, as it never shrinks."""
        if len(self._sorted) != len(self.tried):
            self._sorted = sorted(self.tried)
        return list(self._sorted)

    def fed(self, metric: str) -> bool:
        """Whether points of `metric` may have been fed already."""
        return self.unknown or metric in self.tried
