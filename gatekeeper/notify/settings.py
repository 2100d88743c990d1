"""A notifier's settings: one `notifiers:` entry of the daemon config, as a pydantic model.

`NotifierSettings` holds what every kind shares: the destination (`url` or `url_env`,
`secret_env`, `timeout`), what alerts (`statuses`, `repeat_interval`, `max_lines`) and
how it is delivered (`group_wait`, `retry_*`, `queue_size`). A kind that takes more
subclasses it and names the subclass as its Notifier's `settings_model`; the daemon config
validates each entry with the model of its kind (`NotifierEntry`, kinds.py), so a kind's own
fields are refused with `file:line: notifiers[i].field: problem` like every other field.

Secrets never live in the file: an entry names the environment variable that holds its
URL or signing secret, read only when the notifier is built.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from gatekeeper.errors import ConfigError
from gatekeeper.yamlfile import Duration, PositiveDuration, exactly_one, seconds


class NotifierSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    kind: str  # a notifier kind: slack, lark, webhook, or one a plug-in registers
    url: str | None = None  # prefer url_env: a webhook URL is a secret
    url_env: str | None = None
    secret_env: str | None = None  # lark: signing secret
    statuses: list[Literal["fail", "error", "warn"]] = ["fail", "error"]
    repeat_interval: Duration = 4 * 3600.0  # re-send while still firing; 0 = never
    group_wait: Duration = 2.0  # collect state changes this long before sending
    # The whole request (connect, send, answer), not each socket read.
    timeout: Annotated[float, BeforeValidator(seconds), Field(gt=0, le=300)] = 10.0
    # Keep retrying an undelivered alert until it is this old (across restarts), then
    # count it expired; 0 = one attempt.
    retry_for: Annotated[float, BeforeValidator(seconds), Field(ge=0, le=7 * 86400)] = 3600.0
    retry_backoff: PositiveDuration = 1.0  # first retry pause, doubling; Retry-After wins
    retry_backoff_max: PositiveDuration = 60.0  # the pause between retries stops growing here
    queue_size: int = Field(default=1000, ge=1)
    max_lines: int = Field(default=20, ge=1)  # run lines per group before "+N more"

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, dict) and "retries" in data:
            raise ValueError(
                "retries was replaced by retry_for, a time horizon: alerts are retried with "
                "backoff until they are that old, e.g. retry_for: 1h"
            )
        return data

    @model_validator(mode="after")
    def _backoff(self) -> NotifierSettings:
        if self.retry_backoff > self.retry_backoff_max:
            raise ValueError(
                f"retry_backoff ({self.retry_backoff:g}s) must not exceed retry_backoff_max "
                f"({self.retry_backoff_max:g}s)"
            )
        return self

    @model_validator(mode="after")
    def _url(self) -> NotifierSettings:
        exactly_one(self.url, self.url_env, "a notifier has exactly one of url: or url_env:")
        return self

    def resolved_url(self) -> str:
        if self.url is not None:
            return self.url
        value = os.environ.get(self.url_env or "")
        if not value:
            raise ConfigError(
                f"notifier {self.name}: environment variable {self.url_env} is not set "
                "(it holds the webhook URL)"
            )
        return value

    def resolved_secret(self) -> str | None:
        if not self.secret_env:
            return None
        value = os.environ.get(self.secret_env)
        if not value:
            raise ConfigError(
                f"notifier {self.name}: environment variable {self.secret_env} is not set "
                "(it holds the signing secret)"
            )
        return value

