"""Load policy files (YAML 1.2, ruamel) into `PolicySpec`s; every error names file:line:field.

Hostile files are bounded, not trusted (see policy/bounds.py): at most MAX_POLICY_BYTES,
nesting at most MAX_DEPTH levels, at most ALIAS_BUDGET nodes produced by alias expansion
(a YAML "billion laughs" is refused, not expanded), and no NaN or infinite number anywhere
(a `max: .nan` rule could never fail). Loading time is linear in the file's size.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from gatekeeper.checks import registry
from gatekeeper.errors import PolicyError, one_line, quote
from gatekeeper.expr import parse_expr
from gatekeeper.policy.bounds import (
    ALIAS_BUDGET,
    MAX_DEPTH,
    TooBig,
    check_flow_depth,
    node_count,
    out_of_range,
    plain,
)
from gatekeeper.policy.schema import Policy, Rule, RuleOverride
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.safe_open import open_regular
from gatekeeper.verdict import Mode

POLICY_SUFFIXES = (".yaml", ".yml")
# Policy unit tests live next to their policies (`gatekeeper test`); a directory of
# policies is not a directory of tests.
TEST_SUFFIXES = (".test.yaml", ".test.yml")
MAX_POLICY_BYTES = 64 << 20
def display_path(path: str) -> str:
    """A path as reports show it: relative to the working directory when inside it."""
    absolute = os.path.abspath(path)
    rel = os.path.relpath(absolute)
    return absolute if rel.startswith("..") else rel


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


def read_yaml(path: str) -> Any:
    """Parse one YAML file, keeping line information; errors carry file:line."""
    shown = display_path(path)
    try:
        with open_regular(path, lambda why: PolicyError(why, file=shown)) as fh:
            raw = fh.read(MAX_POLICY_BYTES + 1)
        if len(raw) > MAX_POLICY_BYTES:
            raise PolicyError(
                f"policy file is larger than {MAX_POLICY_BYTES >> 20} MiB; split it", file=shown
            )
        # A whole string, not the file object: ruamel's stream reader re-copies its
        # buffer per chunk, quadratic on a long scalar (a 10 MB description took 47 s).
        text = raw.decode("utf-8")
        check_flow_depth(raw, shown)
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text (byte {exc.start})", file=shown) from None
    except OSError as exc:
        raise PolicyError(f"cannot read policy: {exc.strerror or exc}", file=shown) from None
    yaml = YAML(typ="rt")
    yaml.max_depth = MAX_DEPTH
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = str(exc.problem or exc.context or "invalid YAML").split("\n  in ")[0]
        problem = one_line(problem)
        raise PolicyError(f"invalid YAML: {problem}", file=shown, line=line) from None
    except YAMLError as exc:
        problem = one_line(str(exc).split("\n  in ")[0])
        raise PolicyError(f"invalid YAML: {problem}", file=shown) from None
    except RecursionError:
        raise PolicyError(f"nested deeper than {MAX_DEPTH} levels", file=shown) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # ruamel converts tagged and plain scalars with int()/float(): a 5,000-digit
        # integer or `!!float rules` fails there, without a mark
        long_number = re.search(r"\d{4000,}", text)
        line = text.count("\n", 0, long_number.start()) + 1 if long_number else None
        raise PolicyError(
            f"invalid YAML value: {one_line(str(exc))[:200]}", file=shown, line=line
        ) from None


def load_policy(path: str, _chain: tuple[str, ...] = ()) -> PolicySpec:
    shown = display_path(path)
    tree = read_yaml(path)
    if not isinstance(tree, CommentedMap):
        raise PolicyError(
            "a policy file is a YAML mapping (version, name, rules, ...)", file=shown, line=1
        )
    data = plain_policy(tree, shown)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise _policy_error(exc, tree, shown) from None
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
    )
    if policy.extends:
        spec = _extend(spec, policy, tree, path, _chain)
    return spec


def _extend(
    spec: PolicySpec, policy: Policy, tree: CommentedMap, path: str, chain: tuple[str, ...]
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
    return replace(rule, **changes)


def parse_check(raw: dict[str, Any], tree: Any, where: tuple[Any, ...], shown: str) -> Any:
    ((kind, value),) = raw.items()
    try:
        return registry()[kind].parse(value)
    except ValidationError as exc:
        raise _policy_error(exc, tree, shown, prefix=(*where, kind)) from None
    except ValueError as exc:
        line = line_of(tree, (*where, kind)) if tree is not None else None
        raise PolicyError(f"{_dotted((*where, kind))}: {exc}", file=shown, line=line) from None


def _rule_spec(
    policy: Policy, rule: Rule, tree: Any, where: tuple[Any, ...], shown: str, mode: Mode
) -> RuleSpec:
    check = parse_check(rule.check, tree, (*where, "check"), shown)
    if rule.reduce.value != "none" and (not hasattr(check, "violations") or check.context()):
        raise PolicyError(
            f"{_dotted((*where, 'reduce'))}: {check.kind} judges the series itself; "
            f"reduce must be none, got {rule.reduce.value}",
            file=shown,
            line=line_of(tree, (*where, "reduce")),
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
        expr=parse_expr(rule.expr) if rule.expr else None,
        if_logged=rule.if_logged,
    )


def plain_policy(tree: CommentedMap, shown: str) -> Any:
    """The policy tree as plain values: bounded (see `plain`) and without a non-finite
    number anywhere — a NaN threshold makes a rule that can never fail."""
    budget = [node_count(tree) + ALIAS_BUDGET]
    try:
        data = plain(tree, budget)
    except TooBig as exc:
        raise PolicyError(
            f"{_dotted(exc.loc) or '(top level)'}: {exc}", file=shown, line=line_of(tree, exc.loc)
        ) from None
    bad = out_of_range(data)
    if bad is not None:
        loc, why = bad
        raise PolicyError(f"{_dotted(loc)}: {why}", file=shown, line=line_of(tree, loc))
    return data


def line_of(tree: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest node on `loc` that exists in the YAML tree."""
    line: int | None = None
    node = tree
    if isinstance(node, (CommentedMap, CommentedSeq)):
        line = node.lc.line + 1
    for part in loc:
        if isinstance(node, CommentedMap) and _has_key(node, part):
            line = node.lc.key(part)[0] + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            break
    return line


def _has_key(node: CommentedMap, part: Any) -> bool:
    try:
        return part in node
    except TypeError:  # an unhashable key from a tagged YAML node
        return False


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = one_line(str(part))[:80]
            out += f".{text}" if out else text
    return out


def _policy_error(
    exc: ValidationError, tree: Any, shown: str, prefix: tuple[Any, ...] = ()
) -> PolicyError:
    lines: list[str] = []
    first_line: int | None = None
    for err in exc.errors(include_url=False):
        loc = tuple(
            p
            for p in (*prefix, *err["loc"])
            if not (isinstance(p, str) and p.startswith(("function-", "literal[")))
        )
        where = line_of(tree, loc) if tree is not None else None
        first_line = first_line or where
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        if err["type"] == "missing":
            msg = "is required"
        elif not isinstance(got, (dict, list)) and got is not None and "got" not in msg:
            msg += f", got {quote(got)}"
        msg = one_line(msg)
        field = _dotted(loc) or "(top level)"
        location = f"{shown}:{where}: " if where else f"{shown}: "
        lines.append(f"{location}{field}: {msg}")
    if len(lines) == 1:
        return PolicyError(lines[0])
    # one line: an error must not spill over lines a CI log reads one by one
    return PolicyError(f"{len(lines)} problems in {shown}: " + " | ".join(lines))


__all__ = [
    "ALIAS_BUDGET", "MAX_DEPTH", "apply_override", "check_flow_depth", "line_of",
    "load_policies", "load_policy", "out_of_range", "plain", "read_yaml",
]
