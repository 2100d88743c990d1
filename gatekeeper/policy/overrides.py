"""Command-line rule overrides: relax or switch off one rule of one run, with a reason.

    --override POLICY/RULE=off:REASON          the rule is skipped; every report shows why
    --override POLICY/RULE=warn:REASON         judged, but a failure only warns
    --override POLICY/RULE=KIND=VALUE:REASON   judged with another check, e.g.
               miles-ci-consistency/ppo-kl-step0=abs_max=1e-8:"MLA kernels differ, #123"

This is what replaces a wholesale `--ci-disable-kl-checker`: one rule, one reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gatekeeper.checks import CHECKS, registry
from gatekeeper.errors import PolicyError, UsageError
from gatekeeper.policy.loader import apply_override
from gatekeeper.policy.schema import RuleOverride
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.verdict import Severity
from gatekeeper.yamlfile import load_text, out_of_range, to_plain

_FORM = "POLICY/RULE=off:REASON, POLICY/RULE=warn:REASON or POLICY/RULE=CHECK=VALUE:REASON"


@dataclass(frozen=True)
class CliOverride:
    """A `--override POLICY/RULE=...:REASON` given on the command line, parsed."""

    policy: str
    rule: str
    override: RuleOverride
    text: str
    origin: str = "--override"  # where it was given, as messages name it ("FILE:LINE: override")


def _split_reason(text: str) -> tuple[str, str]:
    """Split `ACTION:REASON` at the first ':' outside brackets/braces (YAML flow values)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == ":" and depth == 0:
            return text[:i], text[i + 1 :].strip().strip('"').strip("'").strip()
    return text, ""


def parse_override(text: str, origin: str = "--override") -> CliOverride:
    """`POLICY/RULE=ACTION:REASON` parsed; `origin` names where it was written in errors
    (the flag, or a config file's line)."""
    target, eq, rest = text.partition("=")
    policy, slash, rule = target.partition("/")
    if not (eq and slash and policy and rule):
        raise UsageError(f"{origin} {text!r}: expected {_FORM}")
    action, reason = _split_reason(rest)
    if not reason:
        raise UsageError(
            f"{origin} {text!r}: give the reason after a colon, e.g. "
            f'{target}=off:"MLA kernels differ, tracked in #123"; every report shows it'
        )
    fields: dict[str, Any] = {"rule": rule, "reason": reason}
    action = action.strip()
    if action == "off":
        fields["off"] = True
    elif action in ("warn", "fail"):
        fields["severity"] = Severity(action)
    elif "=" in action:
        kind, _, raw = action.partition("=")
        kind = kind.strip()
        if CHECKS.get(kind) is None:
            raise UsageError(
                f"{origin} {text!r}: unknown check {kind!r}; known: {', '.join(registry())}"
            )
        try:  # the one YAML reader, as a policy file's check value would be read
            value = to_plain(load_text(raw, "--override"), "--override")
        except PolicyError as exc:
            raise UsageError(f"{origin} {text!r}: cannot read value {raw!r}: {exc}") from None
        bad = out_of_range(value)
        if bad is not None:
            raise UsageError(f"{origin} {text!r}: {bad[1]}")
        fields["check"] = {kind: value}
    else:
        raise UsageError(f"{origin} {text!r}: unknown action {action!r}; expected {_FORM}")
    try:
        return CliOverride(policy, rule, RuleOverride.model_validate(fields), text, origin)
    except ValidationError as exc:
        raise UsageError(f"{origin} {text!r}: {exc.errors()[0]['msg']}") from None


def apply_cli_overrides(
    policies: list[PolicySpec], overrides: list[CliOverride]
) -> list[PolicySpec]:
    """The policies with each override applied to exactly the rule it names."""
    by_name = {p.name: p for p in policies}
    for ov in overrides:
        policy = by_name.get(ov.policy)
        if policy is None:
            raise UsageError(
                f"{ov.origin} {ov.text!r}: no loaded policy is named {ov.policy!r} "
                f"(loaded: {', '.join(by_name) or 'none'})"
            )
        ids = [r.id for r in policy.rules]
        if ov.rule not in ids:
            raise UsageError(
                f"{ov.origin} {ov.text!r}: policy {ov.policy} has no rule {ov.rule!r} "
                f"(rules: {', '.join(ids)})"
            )
        try:
            rules = tuple(
                apply_override(r, ov.override, shown="--override") if r.id == ov.rule else r
                for r in policy.rules
            )
        except PolicyError as exc:  # a check value the kind rejects
            raise UsageError(f"{ov.origin} {ov.text!r}: {exc}") from None
        by_name[ov.policy] = policy.with_rules(rules)
    return [by_name[p.name] for p in policies]
