"""The project config's schema (docs/config.md) and its errors as one `file:line` line:
what `projectconfig` hands a file's table to, imported only when a config file is found
(pydantic models cost milliseconds to build; a repository without a config never pays).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gatekeeper.errors import ConfigError, one_line, quote
from gatekeeper.yamlfile import display_path, dotted

Mode = Literal["auto", "always", "never"]
Text = Annotated[str, Field(min_length=1)]  # an empty path would name the directory itself


@dataclass(frozen=True)
class ProjectConfig:
    """A config file, read: what it sets, paths already resolved against its directory."""

    shown: str  # the file, as the "config" line and errors show it (with its table)
    policies: tuple[str, ...]
    overrides: tuple[tuple[str, str], ...]  # (POLICY/RULE=ACTION:REASON, "FILE:LINE")
    reports: dict[str, str]  # json, junit, html (paths), github, color: those it sets


class _Override(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str = Field(min_length=3, pattern=r"^[^/=]+/[^/=]+$")  # POLICY/RULE
    action: Text  # off | warn | fail | CHECK=VALUE
    reason: Text


class _Reports(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    json_path: str | None = Field(None, alias="json", min_length=1)
    junit: str | None = Field(None, min_length=1)
    html: str | None = Field(None, min_length=1)
    github: Mode | None = None
    color: Mode | None = None


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policies: list[Text] = Field(default_factory=list)
    overrides: list[Any] = Field(default_factory=list)  # a string or an _Override each
    reports: _Reports | None = None


def build(data: dict[str, Any], shown: str, base: str, line_for: Any,
          prefix: tuple[str, ...] = (), file: str | None = None) -> ProjectConfig:
    """A file's settings (`data`, its table at `prefix`) validated, paths resolved against
    `base`; `line_for(loc)` is the line of a location in the table, for errors."""
    file = file or shown
    try:
        cfg = _Schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, file, line_for, prefix)) from None
    overrides = [
        (_override_text(item, i, file, line_for, prefix),
         f"{file}:{line_for(('overrides', i)) or 1}: override")
        for i, item in enumerate(cfg.overrides)
    ]
    given = cfg.reports.model_dump(by_alias=True) if cfg.reports is not None else {}
    reports = {k: v for k, v in given.items() if v}
    for key in ("json", "junit", "html"):
        if key in reports:
            reports[key] = _resolve(base, reports[key])
    policies = tuple(_resolve(base, p) for p in cfg.policies)
    for i, path in enumerate(policies):
        if not os.path.exists(path):
            raise ConfigError(
                f"{file}:{line_for(('policies', i)) or 1}: {dotted((*prefix, 'policies', i))}: "
                f"{path} does not exist (paths are relative to {display_path(base) or '.'}); "
                "fix the path or remove it"
            )
    return ProjectConfig(shown, policies, tuple(overrides), reports)


def _override_text(item: Any, i: int, file: str, line_for: Any,
                   prefix: tuple[str, ...]) -> str:
    """One `overrides` item as `--override` text: a string as it is, or a table /
    mapping of rule, action and reason."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        raise ConfigError(
            f"{file}:{line_for(('overrides', i)) or 1}: {dotted((*prefix, 'overrides', i))}: "
            f"expected 'POLICY/RULE=ACTION:REASON' or {{rule, action, reason}}, got "
            f"{quote(item)}; see docs/config.md"
        )
    try:
        ov = _Override.model_validate(item)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, file, line_for, prefix, ("overrides", i))) from None
    return f"{ov.rule}={ov.action}:{ov.reason}"


def _resolve(base: str, path: str) -> str:
    path = os.path.expanduser(path)
    return display_path(path if os.path.isabs(path) else os.path.join(base, path))


def _problems(exc: ValidationError, file: str, line_for: Any, prefix: tuple[str, ...],
              at: tuple[Any, ...] = ()) -> str:
    """Pydantic's errors as `file:line: field: problem, got value; the fix` (one line);
    `at`: where in the table the validated value is."""
    out = []
    for err in exc.errors(include_url=False):
        loc = (*at, *err["loc"])
        field = dotted((*prefix, *loc)) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = {(): "policies, overrides, reports", ("reports",): "json, junit, html, "
                     "github, color"}.get(loc[:-1], "rule, action, reason")
            msg = f"unknown key; the keys here are {known}"
        else:
            msg = "is required" if err["type"] == "missing" else err["msg"]
            if err["type"] != "missing" and not isinstance(err.get("input"), (dict, list)):
                msg += f", got {quote(err.get('input'))}"
        out.append(f"{file}:{line_for(loc) or 1}: {field}: {one_line(msg)}")
    hint = "; see docs/config.md"
    return (out[0] if len(out) == 1 else f"{len(out)} problems: " + " | ".join(out)) + hint
