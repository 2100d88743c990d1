"""The policy test file format (`*.test.yaml`), read into typed cases with file:line.

policies: [rl-health.yaml]            # relative to this file; default: NAME.yaml for NAME.test.yaml
tests:
  - name: clipfrac above half warns
    run: {name: r1, tags: [e2e], config: {lora_rank: 8}, state: finished}
    series:
      train/pg_clipfrac: "0.1x3 0.6"  # promtool notation, position i = step i
      rollout/raw_reward: {values: "0.5+0.01x90", step_key: rollout/step, start: 0, every: 1}
    live: false                        # true: judge as a live run (not ended)
    chunk: 2                           # also feed every metric in polls of 2 points
    polls:                             # feed up to a step, judge live, compare
      - {until: 2, expect: {pg-clipfrac-high: pending}}
    clock: {now: 100, arrivals: {train/loss: 10}}   # for stale rules
    references:                        # earlier runs for isclose rules, as --reference NAME=RUN
      grad-norm: {series: {train/grad_norm: "0.2x5"}}
    history: empty                     # a history store with no trusted run yet (cold start)
    expect:
      pg-clipfrac-high: {status: warn, step: 3, message: "> 0.5"}
      loss-finite: pass                # a bare status
    others: skip                       # every rule not in expect has this status
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gatekeeper.errors import PolicyError
from gatekeeper.model import RunState
from gatekeeper.toolkit.notation import NotationError, expand
from gatekeeper.verdict import Status
from gatekeeper.yamlfile import (
    MarkedMap,
    display_path,
    is_mapping,
    line_of,
    read_yaml,
    to_plain,
    validation_error,
)


class SeriesInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    values: str
    step_key: str | None = None  # default: the axis a JSONL record would put the metric on
    start: int = 0
    every: int = Field(default=1, ge=1)

    @field_validator("values", mode="before")
    @classmethod
    def _text(cls, raw: Any) -> str:
        text = " ".join(map(str, raw)) if isinstance(raw, list) else str(raw)
        try:
            expand(text)
        except NotationError as exc:
            raise ValueError(str(exc)) from None
        return text

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, raw: Any) -> Any:
        return raw if isinstance(raw, dict) else {"values": raw}


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    step: int | None = None
    message: str | None = None  # a fragment the message must contain
    value: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, raw: Any) -> Any:
        return {"status": raw} if isinstance(raw, str) else raw


class Poll(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    until: int  # feed points whose step <= until, on every axis
    expect: dict[str, Expectation] = Field(default_factory=dict)
    others: Status | None = None


class Clock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    now: float
    arrivals: dict[str, float] = Field(default_factory=dict)


class RunInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "test-run"
    tags: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    state: RunState = RunState.FINISHED


class ReferenceInput(BaseModel):
    """An earlier run an `isclose` rule compares with (as `check --reference NAME=SOURCE`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "reference-run"
    series: dict[str, SeriesInput] = Field(default_factory=dict)


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    run: RunInput = Field(default_factory=RunInput)
    series: dict[str, SeriesInput] = Field(default_factory=dict)
    live: bool = False
    chunk: int | None = Field(default=None, ge=1)
    polls: list[Poll] = Field(default_factory=list)
    clock: Clock | None = None
    references: dict[str, ReferenceInput] = Field(default_factory=dict)  # isclose's earlier runs
    # `empty`: judge with a history store that holds no trusted run yet (miles' cold start),
    # as `check --history URL` on a fresh store; without it, history rules see no store.
    history: Literal["empty"] | None = None
    overrides: list[str] = Field(default_factory=list)  # as --override: POLICY/RULE=ACTION:REASON
    expect: dict[str, Expectation] = Field(default_factory=dict)
    others: Status | None = None

    @field_validator("overrides")
    @classmethod
    def _overrides_parse(cls, value: list[str]) -> list[str]:
        from gatekeeper.errors import UsageError
        from gatekeeper.policy.overrides import parse_override

        for text in value:
            try:
                parse_override(text)
            except UsageError as exc:
                raise ValueError(str(exc).replace("--override ", "", 1)) from None
        return value

    @model_validator(mode="after")
    def _asserts_something(self) -> Case:
        if not self.expect and self.others is None and not self.polls:
            raise ValueError(
                "a test needs expect, others or polls: a test that asserts nothing cannot fail"
            )
        return self


class TestFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policies: list[str] = Field(default_factory=list)
    tests: list[Case] = Field(min_length=1)


class LoadedTests:
    """A parsed test file: its cases, the policy paths it names, the line of each case."""

    def __init__(self, path: str, spec: TestFile, tree: MarkedMap):
        self.path = display_path(path)
        self.spec = spec
        self.tree = tree
        here = os.path.dirname(path)
        names = spec.policies or [_default_policy(path)]
        self.policy_paths = [os.path.normpath(os.path.join(here, p)) for p in names]

    def line(self, *loc: Any) -> int | None:
        return line_of(self.tree, ("tests", *loc))

    def where(self, *loc: Any) -> str:
        return f"{self.path}:{self.line(*loc)}"


def _default_policy(path: str) -> str:
    base = os.path.basename(path)
    for suffix in (".test.yaml", ".test.yml"):
        if base.endswith(suffix):
            return base[: -len(suffix)] + ".yaml"
    raise PolicyError(
        "no `policies:` list, and the file is not named NAME.test.yaml to imply NAME.yaml",
        file=display_path(path),
        line=1,
    )


def load_tests(path: str) -> LoadedTests:
    shown = display_path(path)
    tree = read_yaml(path, "test file")
    if not is_mapping(tree):
        raise PolicyError("a test file is a YAML mapping (policies, tests)", file=shown, line=1)
    try:
        spec = TestFile.model_validate(to_plain(tree, shown))
    except ValidationError as exc:
        raise validation_error(exc, tree, shown) from None
    loaded = LoadedTests(path, spec, tree)
    for p in loaded.policy_paths:
        if not os.path.isfile(p):
            raise PolicyError(
                f"policies: no such policy file {p}", file=shown, line=line_of(tree, ("policies",))
            )
    return loaded
