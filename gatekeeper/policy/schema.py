"""Policy language v1, as pydantic models. Field docs here are the reference the README
mirrors. Check parameters are validated by each check kind's own model (see checks/).
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gatekeeper.checks import CHECKS, registry
from gatekeeper.policy.conditions import Condition, parse_conditions
from gatekeeper.verdict import Mode, Severity
from gatekeeper.yamlfile import exactly_one

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"


# Empty-container factories as Python functions, not the `dict`/`list` builtins: pydantic
# inspects a default factory's signature, and a builtin's is parsed from its text with
# tokenize (its import and regexes: ~3 ms of a small check's start-up).
def _dict() -> dict[str, Any]:
    return {}


def _list() -> list[Any]:
    return []


class Reduce(str, enum.Enum):
    NONE = "none"
    MEAN = "mean"
    MEDIAN = "median"
    MIN = "min"
    MAX = "max"
    LAST = "last"


class Steps(BaseModel):
    """Which points of the metric's own step axis a rule judges."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: Literal["all", "first", "last", "list", "range", "tail", "every"]
    steps: tuple[int, ...] = ()
    start: int | None = None
    end: int | None = None
    count: int | None = None
    # kind "every": steps with step % period == offset; the period is a number, or read
    # from the run's config: `config.<key>` or an expression over config keys, several
    # tried in order (the first whose keys are all set wins), `default` when none is.
    # miles: the first step of each rollout is train/step % num_steps_per_rollout == 0, and
    # miles leaves num_steps_per_rollout null when --global-batch-size sets it instead.
    period_from: tuple[str, ...] = ()
    offset: int = 0

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, raw: Any) -> Any:
        if isinstance(raw, Steps):
            return raw
        if raw in ("all", "first", "last"):
            return {"kind": raw}
        if isinstance(raw, int) and not isinstance(raw, bool):
            return {"kind": "list", "steps": (raw,)}
        if isinstance(raw, list):
            if not raw or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
                raise ValueError(f"a step list holds whole numbers, got {raw!r}")
            return {"kind": "list", "steps": tuple(dict.fromkeys(raw))}
        if isinstance(raw, dict) and set(raw) == {"last"}:
            n = raw["last"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"steps.last must be a whole number >= 1, got {n!r}")
            return {"kind": "tail", "count": n}
        if isinstance(raw, dict) and raw and set(raw) <= {"from", "to"}:
            lo, hi = raw.get("from"), raw.get("to")
            for name, v in (("from", lo), ("to", hi)):
                if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                    raise ValueError(f"steps.{name} must be a whole number, got {v!r}")
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"steps.from ({lo}) must be <= steps.to ({hi})")
            return {"kind": "range", "start": lo, "end": hi}
        if isinstance(raw, dict) and "every" in raw:
            return _every(raw)
        if isinstance(raw, dict) and "kind" in raw:
            return raw
        raise ValueError(
            "steps must be all, first, last, a list of steps like [0, 1], "
            f"{{from: a, to: b}}, {{last: n}} or {{every: n | config.<key>, default: n}}; "
            f"got {raw!r}"
        )

    def describe(self) -> str:
        if self.kind == "list":
            return ",".join(map(str, self.steps))
        if self.kind == "range":
            lo = "" if self.start is None else self.start
            hi = "" if self.end is None else self.end
            return f"{lo}..{hi}"
        if self.kind == "tail":
            return f"last {self.count}"
        if self.kind == "every":
            period = " or ".join(self.period_from) or str(self.count)
            if self.period_from and self.count is not None:
                period += f" or {self.count}"
            return f"step % ({period}) == {self.offset}"
        return self.kind


def period_expr(text: str) -> Any:
    """`config.<key>`, or an expression over config keys (the expr grammar)."""
    from gatekeeper.expr import parse_expr  # only a policy with a `steps.every` key

    try:
        expr = parse_expr(text)
    except ValueError as exc:
        raise ValueError(f"steps.every: {exc}") from None
    bad = [m for m in expr.metrics if not m.startswith("config.") or m == "config."]
    if bad:
        raise ValueError(
            f"steps.every reads the run's config: config.<key> or an expression over them, "
            f"got {', '.join(map(repr, bad))} in {text!r}"
        )
    return expr


def _whole(name: str, v: Any, low: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ValueError(f"steps.{name} must be a whole number >= {low}, got {v!r}")
    return v


def _every(raw: dict[str, Any]) -> dict[str, Any]:
    unknown = set(raw) - {"every", "default", "offset"}
    if unknown:
        raise ValueError(f"steps.every takes every, default and offset; unknown: {sorted(unknown)}")
    every = raw["every"]
    out: dict[str, Any] = {"kind": "every", "offset": _whole("offset", raw.get("offset", 0), 0)}
    sources = every if isinstance(every, list) else [every]
    if every and all(isinstance(e, str) for e in sources):
        for text in sources:
            period_expr(text)
        out["period_from"] = tuple(sources)
        if "default" in raw:
            out["count"] = _whole("default", raw["default"], 1)
        return out
    if "default" in raw:
        raise ValueError("steps.default goes with every: config.<key>, not a number")
    out["count"] = _whole("every", every, 1)
    return out


class Rule(BaseModel):
    """One rule: a metric, the points to judge, a reduction and exactly one check."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    id: str = Field(pattern=ID_PATTERN)
    metric: str | None = Field(min_length=1)  # required unless expr is given
    expr: str | None = None  # a derived metric instead of `metric` (gatekeeper/expr.py)
    steps: Steps = Field(default_factory=lambda: Steps(kind="all"))
    reduce: Reduce = Reduce.NONE
    check: dict[str, Any]
    severity: Severity = Severity.FAIL
    when: dict[str, Any] = Field(default_factory=_dict)
    for_: int = Field(default=1, ge=1, alias="for")
    # judge the metric only if the run logs it: absent at the end -> SKIP with that
    # reason (miles' asserts that run only `if key in log_dict`), never a silent pass
    if_logged: bool = False
    description: str = ""

    @field_validator("check")
    @classmethod
    def _one_known_check(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) == 1 and _known(next(iter(value))):
            return value  # found alone: the other kinds are not imported
        kinds = registry()  # every kind, for the message
        if len(value) != 1:
            raise ValueError(
                f"a rule has exactly one check, got {len(value)} ({', '.join(map(str, value))}); "
                f"known checks: {', '.join(kinds)}"
            )
        (kind,) = value
        if kind not in kinds:
            raise ValueError(f"unknown check {kind!r}; known checks: {', '.join(kinds)}")
        return value

    @field_validator("when")
    @classmethod
    def _conditions(cls, value: dict[str, Any]) -> dict[str, Any]:
        parse_conditions(value)
        return value

    @field_validator("expr")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is not None:
            from gatekeeper.expr import parse_expr  # only a rule with `expr:`

            parse_expr(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _expr_instead_of_metric(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "expr" in raw and "metric" not in raw:
            return {**raw, "metric": None}
        return raw

    @model_validator(mode="after")
    def _metric_or_expr(self) -> Rule:
        message = "a rule reads exactly one of metric or expr (a derived metric)"
        exactly_one(self.metric, self.expr, message)
        return self

    def conditions(self) -> list[Condition]:
        return parse_conditions(self.when)


def _known(kind: object) -> bool:
    """Whether `kind` names a check, importing that kind's module alone."""
    return isinstance(kind, str) and CHECKS.get(kind) is not None


class Match(BaseModel):
    """Which runs a policy applies to; every given key must hold."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tags: list[str] = Field(default_factory=_list)
    name: str | None = None
    config: dict[str, Any] = Field(default_factory=_dict)

    @field_validator("config")
    @classmethod
    def _conditions(cls, value: dict[str, Any]) -> dict[str, Any]:
        parse_conditions({f"config.{k}": v for k, v in value.items()})
        return value


class RuleOverride(BaseModel):
    """In a policy that `extends` another: relax or switch off one inherited rule."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    rule: str
    reason: str = Field(min_length=1)
    off: bool = False
    severity: Severity | None = None
    check: dict[str, Any] | None = None
    steps: Steps | None = None

    @model_validator(mode="after")
    def _does_something(self) -> RuleOverride:
        if not (self.off or self.severity or self.check or self.steps):
            raise ValueError("an override sets off: true, severity, check or steps")
        if self.check is not None:
            Rule._one_known_check(self.check)
        return self


class Policy(BaseModel):
    """A policy file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    name: str = Field(pattern=ID_PATTERN)
    description: str = ""
    mode: Mode = Mode.ENFORCE
    match: Match | None = None
    extends: str | None = None
    # config keys this policy's `when:`/`steps:` read, each with the value to suggest:
    # a run that does not set one is ERROR on every rule, never judged as the default
    requires_config: dict[str, Any] = Field(default_factory=_dict)
    overrides: list[RuleOverride] = Field(default_factory=_list)
    rules: list[Rule] = Field(default_factory=_list)
    # run states this policy lets pass on their data, each with its reason (run_state.py)
    allow_states: dict[str, str] = Field(default_factory=_dict)
    # the reason a gate that judges no rule may pass (verdict.py, GateStatus.NOTHING)
    allow_nothing_judged: str | None = None

    @field_validator("allow_nothing_judged")
    @classmethod
    def _a_reason(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("allow_nothing_judged: give the reason as text")
        return value

    @field_validator("allow_states")
    @classmethod
    def _known_states(cls, value: dict[str, str]) -> dict[str, str]:
        from gatekeeper.run_state import ALLOWABLE

        for state, reason in value.items():
            if state not in (*ALLOWABLE, "incomplete"):
                raise ValueError(
                    f"allow_states: unknown state {state!r}; expected one of "
                    f"{', '.join(ALLOWABLE)} (or incomplete)"
                )
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"allow_states.{state}: give the reason as text")
        return value

    @field_validator("requires_config", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, list):  # a plain list of keys: no suggested value
            if not all(isinstance(k, str) and k for k in value):
                raise ValueError(f"requires_config lists config keys, got {value!r}")
            return {k: None for k in value}
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> Policy:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice; ids are unique in a policy")
            seen.add(rule.id)
        if not self.rules and not self.extends:
            raise ValueError("a policy needs rules (or extends another policy)")
        return self
