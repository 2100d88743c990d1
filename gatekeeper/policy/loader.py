"""Load policy files (YAML 1.2) into `PolicySpec`s; every error names file:line:field.
Read by the one YAML reader (`yamltree.py`: libyaml, YAML 1.2 core schema).

Hostile files are bounded, not trusted (see yamlfile.py): at most MAX_BYTES,
nesting at most MAX_DEPTH levels, at most ALIAS_BUDGET nodes produced by alias expansion
(a YAML "billion laughs" is refused, not expanded), and no NaN or infinite number anywhere
(a `max: .nan` rule could never fail). Loading time is linear in the file's size.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from gatekeeper.checks import CHECKS
from gatekeeper.errors import PolicyError
from gatekeeper.policy.patterns import config_key, is_pattern
from gatekeeper.policy.schema import Policy, Rule, RuleOverride
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.verdict import Mode
from gatekeeper.yamlfile import (
    display_path,
    dotted,
    is_mapping,
    line_of,
    out_of_range,
    read_yaml,
    to_plain,
    validation_error,
)

POLICY_SUFFIXES = (".yaml", ".yml")
# Policy unit tests live next to their policies (`gatekeeper test`); a directory of
# policies is not a directory of tests.
TEST_SUFFIXES = (".test.yaml", ".test.yml")
def policy_files(paths: list[str]) -> list[str]:
    """Expand files and directories (recursively, `*.yaml`/`*.yml` but not `*.test.yaml`,
    sorted)."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(
                os.path.join(root, name)
                for root, _, names in os.walk(path)
                for name in names
                if name.endswith(POLICY_SUFFIXES) and not name.endswith(TEST_SUFFIXES)
            )
            if not found:
                raise PolicyError("directory holds no *.yaml policy files", file=path)
            out.extend(found)
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise PolicyError("no such policy file or directory", file=path)
    return list(dict.fromkeys(os.path.normpath(p) for p in out))


def load_policies(paths: list[str]) -> list[PolicySpec]:
    """Load every policy under `paths`. A base that another loaded policy extends is not
    run on its own: the extending policy (with its overrides) replaces it."""
    specs = [load_policy(p) for p in policy_files(paths)]
    extended = {os.path.abspath(s.extends) for s in specs if s.extends}
    specs = [s for s in specs if os.path.abspath(s.file) not in extended]
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.name in seen:
            raise PolicyError(
                f"policy name {spec.name!r} is also used by {seen[spec.name]}; names are unique",
                file=spec.file,
                line=1,
            )
        seen[spec.name] = spec.file
    return specs


def load_policy(path: str, _chain: tuple[str, ...] = ()) -> PolicySpec:
    shown = display_path(path)
    tree = read_yaml(path)
    if not is_mapping(tree):
        raise PolicyError(
            "a policy file is a YAML mapping (version, name, rules, ...)", file=shown, line=1
        )
    data = plain_policy(tree, shown)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, tree, shown) from None
    rules = tuple(
        _rule_spec(policy, rule, tree, ("rules", i), shown, policy.mode)
        for i, rule in enumerate(policy.rules)
    )
    spec = PolicySpec(
        name=policy.name,
        file=shown,
        mode=policy.mode,
        description=policy.description,
        match=policy.match,
        rules=rules,
        requires_config=dict(policy.requires_config),
        allow_states={
            ("running" if k == "incomplete" else k): v for k, v in policy.allow_states.items()
        },
        allow_nothing_judged=policy.allow_nothing_judged,
    )
    if policy.extends:
        spec = _extend(spec, policy, tree, path, _chain)
    return spec


def _extend(
    spec: PolicySpec, policy: Policy, tree: Any, path: str, chain: tuple[str, ...]
) -> PolicySpec:
    shown = spec.file
    base_path = os.path.normpath(os.path.join(os.path.dirname(path), policy.extends or ""))
    line = line_of(tree, ("extends",))
    if os.path.abspath(base_path) in chain or os.path.abspath(base_path) == os.path.abspath(path):
        raise PolicyError(f"extends {policy.extends!r} makes a cycle", file=shown, line=line)
    if not os.path.isfile(base_path):
        raise PolicyError(
            f"extends: no such policy file {policy.extends!r} (resolved to {base_path})",
            file=shown,
            line=line,
        )
    base = load_policy(base_path, (*chain, os.path.abspath(path)))
    inherited = {r.id: r for r in base.rules}
    for i, override in enumerate(policy.overrides):
        where = ("overrides", i)
        if override.rule not in inherited:
            raise PolicyError(
                f"overrides[{i}].rule: {override.rule!r} is not a rule of {base.name} "
                f"(rules: {', '.join(inherited)})",
                file=shown,
                line=line_of(tree, (*where, "rule")),
            )
        inherited[override.rule] = apply_override(
            inherited[override.rule], override, tree, where, shown
        )
    own_ids = {r.id for r in spec.rules}
    clash = own_ids & set(inherited)
    if clash:
        raise PolicyError(
            f"rule id(s) {sorted(clash)} are also inherited from {base.name}; use overrides "
            "to change an inherited rule",
            file=shown,
            line=line_of(tree, ("rules",)),
        )
    fields = policy.model_fields_set
    rules = tuple(replace(r, policy=spec.name) for r in inherited.values())
    rules = tuple(
        replace(r, mode=spec.mode if "mode" in fields else base.mode) for r in rules
    ) + spec.rules
    return PolicySpec(
        name=spec.name,
        file=shown,
        mode=spec.mode if "mode" in fields else base.mode,
        description=spec.description if "description" in fields else base.description,
        match=spec.match if "match" in fields else base.match,
        rules=rules,
        extends=base_path,
        requires_config={**base.requires_config, **spec.requires_config},
        allow_states={**base.allow_states, **spec.allow_states},
        allow_nothing_judged=spec.allow_nothing_judged or base.allow_nothing_judged,
    )


def apply_override(
    rule: RuleSpec,
    override: RuleOverride,
    tree: Any = None,
    where: tuple[Any, ...] = (),
    shown: str = "--override",
) -> RuleSpec:
    """The rule as an override changes it; the override's reason travels with it."""
    changes: dict[str, Any] = {"override": override.reason}
    if override.off:
        changes["off"] = True
    if override.severity is not None:
        changes["severity"] = override.severity
    if override.steps is not None:
        changes["steps"] = override.steps
    if override.check is not None:
        changes["check"] = parse_check(override.check, tree, (*where, "check"), shown)
        changes["check_from"] = config_ref(override.check)
        if changes["check_from"] is not None and rule.reduce.value == "none":
            raise PolicyError(
                f"{dotted((*where, 'check'))}: a bound read from config needs a rule with reduce:",
                file=shown,
                line=line_of(tree, (*where, "check")) if tree is not None else None,
            )
    return replace(rule, **changes)


CONFIG_REF = "config."


def config_ref(raw: dict[str, Any]) -> str | None:
    """`config.KEY` when a one-bound check takes its value from the run's config."""
    ((_, value),) = raw.items()
    if isinstance(value, str) and value.startswith(CONFIG_REF) and len(value) > len(CONFIG_REF):
        return value
    return None


def parse_check(raw: dict[str, Any], tree: Any, where: tuple[Any, ...], shown: str) -> Any:
    ((kind, value),) = raw.items()
    cls = CHECKS.get(kind)
    if cls is None:  # the schema lets only known kinds through: a bug, as before
        raise KeyError(kind)
    if config_ref(raw) is not None:
        return _unbound(cls, kind, tree, where, shown)
    try:
        return cls.parse(value)
    except ValidationError as exc:
        raise validation_error(exc, tree, shown, prefix=(*where, kind)) from None
    except ValueError as exc:
        line = line_of(tree, (*where, kind)) if tree is not None else None
        raise PolicyError(f"{dotted((*where, kind))}: {exc}", file=shown, line=line) from None


def _unbound(cls: Any, kind: str, tree: Any, where: tuple[Any, ...], shown: str) -> Any:
    """A one-bound check whose value comes from the run's config: a NaN placeholder until
    the run is judged (a NaN bound violates every point, so it can never pass by mistake)."""
    from gatekeeper.checks.bound import Bound

    if not issubclass(cls, Bound):
        line = line_of(tree, (*where, kind)) if tree is not None else None
        raise PolicyError(
            f"{dotted((*where, kind))}: only a one-bound check (min, max, lt, gt, abs_max, "
            f"abs_lt) takes its value from config, not {kind}",
            file=shown,
            line=line,
        )
    return cls.model_construct(value=float("nan"))


def _rule_spec(
    policy: Policy, rule: Rule, tree: Any, where: tuple[Any, ...], shown: str, mode: Mode
) -> RuleSpec:
    check = parse_check(rule.check, tree, (*where, "check"), shown)
    wrong = _misfit(rule, check)
    if wrong is not None:
        field, why = wrong
        raise PolicyError(
            f"{dotted((*where, field))}: {why}", file=shown, line=line_of(tree, (*where, field))
        )
    check_from = config_ref(rule.check)
    if check_from is not None and rule.reduce.value == "none":
        raise PolicyError(
            f"{dotted((*where, 'check'))}: a bound read from config ({check_from}) needs "
            "reduce: (a reduced rule is judged once the run's config is known; a rule "
            "judged point by point is judged as its points arrive)",
            file=shown,
            line=line_of(tree, (*where, "check")),
        )
    return RuleSpec(
        policy=policy.name,
        id=rule.id,
        metric=rule.metric or rule.expr or "",
        steps=rule.steps,
        reduce=rule.reduce,
        check=check,
        severity=rule.severity,
        mode=mode,
        conditions=tuple(rule.conditions()),
        source=f"{shown}:{line_of(tree, where)}",
        for_=rule.for_,
        description=rule.description,
        expr=_parse_expr(rule.expr) if rule.expr else None,
        if_logged=rule.if_logged,
        check_from=check_from,
    )


def _misfit(rule: Rule, check: Any) -> tuple[str, str] | None:
    """(field, why) when the rule's check does not fit the rest of the rule."""
    if rule.reduce.value != "none" and (not hasattr(check, "violations") or check.context()):
        return "reduce", (
            f"{check.kind} judges the series itself; reduce must be none, got {rule.reduce.value}"
        )
    if check.kind == "present_at" and (rule.reduce.value != "none" or rule.expr):
        return "check", (
            "present_at judges whether a metric has a point at each step of others: it takes "
            "a metric: (no expr:) and no reduce:"
        )
    templated = rule.metric is not None and (is_pattern(rule.metric) or config_key(rule.metric))
    if check.kind == "history" and templated:
        return "metric", (
            f"a history rule keeps its baselines under one fixed metric name, got "
            f"{rule.metric!r}; name the metric"
        )
    return None


def _parse_expr(text: str) -> Any:
    from gatekeeper.expr import parse_expr  # only a policy with an `expr:` rule imports it

    return parse_expr(text)


def plain_policy(tree: Any, shown: str) -> Any:
    """The policy tree as plain values: bounded (see `plain`) and without a non-finite
    number anywhere — a NaN threshold makes a rule that can never fail."""
    data = to_plain(tree, shown)
    bad = out_of_range(data)
    if bad is not None:
        loc, why = bad
        raise PolicyError(f"{dotted(loc)}: {why}", file=shown, line=line_of(tree, loc))
    return data


__all__ = ["apply_override", "load_policies", "load_policy", "policy_files"]
