"""What a policy reads from the run itself rather than from its points: the config keys
its variants need (`requires_config`), step periods taken from config (`steps: {every:
config.key}`), and metrics the source could not read whole (`Run.metric_errors`).
Pure, like the engine that calls it."""

from __future__ import annotations

from typing import Any

import numpy as np

from gatekeeper.checks import Outcome
from gatekeeper.fmt import fmt
from gatekeeper.model import Run
from gatekeeper.policy.schema import period_expr
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.verdict import Status


def period_from_config(sources: tuple[str, ...], run: Run) -> int | str | None:
    """The first period the run's config gives (None: none set; str: why it is invalid)."""
    for text in sources:
        expr = period_expr(text)
        values = [run.lookup(name) for name in expr.metrics]
        if not all(found and value is not None for found, value in values):
            continue
        given = {n: v for n, (_, v) in zip(expr.metrics, values, strict=True)}
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in given.values()):
            return f"{text}: config values must be numbers, got {given}"
        value = float(expr.evaluate({k: np.asarray(float(v)) for k, v in given.items()}))
        if not (np.isfinite(value) and value >= 1 and value == int(value)):
            shown = "" if len(given) == 1 else f" {given}"
            return f"{text} is {fmt(value)}{shown}; steps every needs a whole number >= 1"
        return int(value)
    return None


def config_bound(rule: RuleSpec, run: Run) -> Any:
    """The rule's check with its bound read from the run's config (`check: {min:
    config.KEY}`), or why it cannot be (str)."""
    assert rule.check_from is not None
    key = rule.check_from.removeprefix("config.")
    found, value = run.lookup(rule.check_from)
    if not found or value is None:
        return (
            f"run config does not set {key}, which rule {rule.key} reads for its bound; "
            f"give the run's value, e.g. --config {key}=... (or \"config\" in run.json)"
        )
    number = _number(value)
    if number is None:
        return f"config {key} is {value!r}; the bound of {rule.key} must be a finite number"
    try:
        return type(rule.check).model_validate({"value": number})
    except ValueError as exc:  # pydantic's ValidationError: e.g. abs_max of a negative
        first = str(exc).splitlines()[-1].strip()
        return f"config {key} = {fmt(number)} is no bound for {rule.check.kind}: {first}"


def _number(value: Any) -> float | None:
    """A finite number, also from text (`--config k=0.55` may arrive as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and np.isfinite(value):
        return float(value)
    return None


def missing_config(policy: PolicySpec, run: Run) -> str | None:
    """Why the policy cannot pick its variants: config keys it reads that the run lacks."""
    missing = [k for k in policy.requires_config if not run.lookup(f"config.{k}")[0]]
    if not missing:
        return None
    flags = " ".join(
        f"--config {k}={_yaml_text(policy.requires_config[k])}" for k in missing
    )
    return (
        f"run config does not set {', '.join(missing)}, which policy {policy.name} reads to "
        f"pick its variants; give the run's values, e.g. {flags} (or \"config\" in run.json)"
    )


def _yaml_text(value: Any) -> str:
    if value is None:
        return "..."
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def metric_error(rule: RuleSpec, run: Run) -> Outcome | None:
    """A metric the source could not read whole (null or duplicate step): ERROR, its reason."""
    if not run.metric_errors:
        return None
    inputs = rule.expr.metrics if rule.expr is not None else (rule.metric,)
    for metric in inputs:
        reason = run.metric_errors.get(metric)
        if reason is not None:
            return Outcome(Status.ERROR, f"{metric}: {reason}")
    return None
