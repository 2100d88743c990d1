"""Daemon discovery of Prometheus runs: each value of a run label under a selector."""

from __future__ import annotations

import re
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, field_validator

from gatekeeper.errors import UsageError
from gatekeeper.sources.base import checked_url
from gatekeeper.sources.prometheus.api import PrometheusApi
from gatekeeper.yamlfile import seconds

_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class PrometheusFilter(BaseModel):
    """`prometheus: {url, selector: '{job="trainer"}', run_label: run, start: -24h}`: one
    run per value of `run_label` among the series the selector matches. `late` (e.g.
    `35s`): how long after its time a sample may be stored, for a scrape_timeout above
    10 s (the source's default, 15s, when unset: the runs' specs, which key their state,
    stay as they were)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    url: str
    selector: str
    run_label: str = "run"
    start: str = "-24h"
    axis: str = "index"
    late: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            checked_url(value, "Prometheus")
        except UsageError as exc:
            raise ValueError(str(exc)) from None  # shown at the config's line
        return value

    @field_validator("late")
    @classmethod
    def _late(cls, value: str | None) -> str | None:
        if value is not None:
            seconds(value)  # its ValueError is shown at the config's line
        return value

    @field_validator("run_label")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError(f"not a Prometheus label name: {value!r}")
        return value

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        if not (value.strip().startswith("{") and value.strip().endswith("}")):
            raise ValueError('expected a label selector like {job="trainer"}')
        return value.strip()

    def runs(self) -> list[str]:
        api = PrometheusApi(self.url)
        values = api.get(f"/api/v1/label/{self.run_label}/values", [("match[]", self.selector)])
        inner = self.selector[1:-1].strip()
        out = []
        for value in values or []:
            escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
            matchers = f'{inner},{self.run_label}="{escaped}"' if inner else (
                f'{self.run_label}="{escaped}"'
            )
            out.append(
                f"prom+{self.url.rstrip('/')}?selector={quote('{' + matchers + '}', safe='{}=,')}"
                f"&start={self.start}&axis={self.axis}&run={quote(str(value))}"
                + (f"&late={self.late}" if self.late is not None else "")
            )
        return sorted(out)

    def describe(self) -> str:
        return f"Prometheus runs by {self.run_label} in {self.selector} at {self.url}"
