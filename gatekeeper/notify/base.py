"""The notifier contract: render groups of alerts into bodies, post one, fail clearly.

A `Notifier` turns groups of alerts into request bodies (`render`) and posts one
(`post`) within a total deadline, raising `SendError` on failure. `RateLimiter` keeps a
channel within its destination's limits. The delivery loop is `channel.Channel`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from gatekeeper.notify import deadline
from gatekeeper.notify.grouping import Group

if TYPE_CHECKING:
    from gatekeeper.notify.settings import NotifierSettings

log = logging.getLogger("gatekeeper.notify")


class SendError(Exception):
    """A post failed. `retryable` failures are retried; `retry_after` is the server's hint."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class Limit:
    count: int
    per: float  # seconds


class Notifier(ABC):
    """One chat/webhook destination. Subclasses set `kind` and `limits`; a kind that
    takes settings of its own names a `NotifierSettings` subclass declaring them as
    `settings_model` (and reads them in `from_settings`)."""

    kind: ClassVar[str]
    limits: ClassVar[tuple[Limit, ...]] = ()
    # The model of this kind's `notifiers:` entry, a NotifierSettings subclass declaring
    # its own fields; None: the common NotifierSettings, all the built-in kinds need.
    settings_model: ClassVar[type[NotifierSettings] | None] = None

    @classmethod
    def check_settings(cls, settings: NotifierSettings) -> None:
        """Refuse settings this kind cannot use beyond what its model states (e.g. the
        resolved URL): ValueError, shown at the entry's line."""
        return None

    @classmethod
    def from_settings(cls, settings: NotifierSettings) -> Notifier:
        """The notifier a config entry describes; URL and secret come from the environment."""
        return cls(
            settings.name,
            settings.resolved_url(),
            timeout=settings.timeout,
            max_lines=settings.max_lines,
            secret=settings.resolved_secret(),
        )

    def __init__(
        self, name: str, url: str, *, timeout: float, max_lines: int, secret: str | None = None
    ):
        self.name = name
        self._url = url  # a secret: never logged
        self.secret = secret
        self.max_lines = max_lines
        self.timeout = timeout  # the whole request's deadline, not per socket operation
        self.client = deadline.client(timeout)

    @abstractmethod
    def render(self, groups: Sequence[Group]) -> list[dict[str, Any]]:
        """Request bodies for these groups (usually one; split only when limits demand)."""

    def post(self, body: dict[str, Any]) -> None:
        """Send one body. Translates transport errors and error answers into SendError."""
        try:
            with deadline.within(self.timeout):
                resp = self.client.post(self._url, json=body, headers=self.headers(body))
        except httpx.TimeoutException:
            raise SendError(f"{self.name}: no complete answer within {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise SendError(f"{self.name}: {type(exc).__name__}") from None
        self.check_response(resp)

    def headers(self, body: dict[str, Any]) -> dict[str, str]:
        """Headers of the request carrying `body`, beyond httpx's own (none by default)."""
        return {}

    def check_response(self, resp: httpx.Response) -> None:
        if resp.status_code == 429:
            raise SendError(f"{self.name}: rate limited (429)", retry_after=_retry_after(resp))
        if resp.status_code >= 500:
            raise SendError(f"{self.name}: server error {resp.status_code}")
        if resp.status_code >= 400:
            raise SendError(
                f"{self.name}: rejected with {resp.status_code}: {resp.text[:200]}", retryable=False
            )

    def scrub(self, text: str) -> str:
        """`text` without this notifier's URL or secret (a receiver may echo them)."""
        for secret in (self._url, self.secret):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    def close(self) -> None:
        self.client.close()


def _retry_after(resp: httpx.Response) -> float | None:
    raw = resp.headers.get("Retry-After")
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


class RateLimiter:
    """Sliding windows: at most `count` sends in any `per` seconds, for every limit."""

    def __init__(self, limits: Sequence[Limit], clock: Callable[[], float] = time.monotonic):
        self.limits = list(limits)
        self.clock = clock
        self.sent: deque[float] = deque(maxlen=max((lim.count for lim in limits), default=1))

    def delay(self) -> float:
        """Seconds to wait before the next send is allowed."""
        now = self.clock()
        wait = 0.0
        for lim in self.limits:
            if len(self.sent) >= lim.count:
                oldest = self.sent[-lim.count]
                wait = max(wait, oldest + lim.per - now)
        return wait

    def record(self) -> None:
        self.sent.append(self.clock())
