"""The bounded HTTP transport of the REST source families (MLflow, Prometheus).

Every request is bounded: a timeout per request, a cap on the answer's size (read as it
streams in, never whole first), and transient failures retried with doubling, jittered
pauses within a total budget (a server's Retry-After hint is used where the family takes
it). The limits come from the environment under the family's prefix (`{PREFIX}_TIMEOUT`,
`{PREFIX}_MAX_BYTES`, `{PREFIX}_RETRY_SECONDS`); credentials are handed in by the family,
which reads them from the environment, and never appear in a message: messages name the
server by the URL the family gives without credentials.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gatekeeper.errors import SourceError, SourceUnavailable
from gatekeeper.sources.base import env_number

# httpx is imported when a client is made: every `check` imports the source families,
# and httpx (which pulls rich) is needed by few of them
if TYPE_CHECKING:
    import httpx

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    timeout: float  # seconds, per request
    max_bytes: int  # the largest answer read
    budget: float  # seconds of retries before a request is given up

    @classmethod
    def from_env(cls, prefix: str, *, retry_seconds: float, timeout: float | None = None) -> Limits:
        return cls(
            timeout=timeout or env_number(f"{prefix}_TIMEOUT", 20, 0.1, 3600),
            max_bytes=int(env_number(f"{prefix}_MAX_BYTES", 64 << 20, 1024, 1 << 40)),
            budget=env_number(f"{prefix}_RETRY_SECONDS", retry_seconds, 0, 86400),
        )


@dataclass(frozen=True)
class Transient:
    """Why an attempt failed in a way worth retrying, and how long the server asked us to
    wait (seconds), if it did."""

    problem: str
    wait: float | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: httpx.Headers


class BoundedHttp:
    """One server's HTTP client within `limits`; counts every attempt in `requests`."""

    def __init__(
        self,
        base: str,
        limits: Limits,
        *,
        token: str | None = None,
        auth: tuple[str, str] | None = None,
        verify: bool = True,
    ):
        import httpx

        self.base = base  # without credentials: it appears in messages
        self.limits = limits
        self.requests = 0
        headers = {"User-Agent": "gatekeeper"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base, headers=headers, auth=auth, verify=verify,
            timeout=httpx.Timeout(limits.timeout), follow_redirects=False,
        )

    def request(
        self,
        method: str,
        url: str,
        *,
        judge: Callable[[Answer], T | Transient],
        too_large: str,
        gave_up: Callable[[str], str],
        **kw: Any,
    ) -> T:
        """What `judge` makes of the answer, retried while it (or the transport) fails
        transiently; SourceError(`too_large`) for an answer over the cap, and
        SourceUnavailable(`gave_up(problem)`) once the budget is spent."""
        deadline = time.monotonic() + self.limits.budget
        delay = 0.5
        while True:
            got = self._attempt(method, url, too_large, kw)
            outcome = got if isinstance(got, Transient) else judge(got)
            if not isinstance(outcome, Transient):
                return outcome
            left = deadline - time.monotonic()
            if left <= delay:
                raise SourceUnavailable(gave_up(outcome.problem))
            time.sleep(min(outcome.wait or delay, left) * random.uniform(0.8, 1.0))
            delay = min(delay * 2, 10.0)

    def _attempt(
        self, method: str, url: str, too_large: str, kw: dict[str, Any]
    ) -> Answer | Transient:
        import httpx

        self.requests += 1
        try:
            with self._http.stream(method, url, **kw) as resp:
                body = self._read(resp, too_large)
        except httpx.TransportError as exc:
            return Transient(type(exc).__name__)
        return Answer(resp.status_code, body, resp.headers)

    def _read(self, resp: httpx.Response, too_large: str) -> bytes:
        chunks, size = [], 0
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > self.limits.max_bytes:
                raise SourceError(too_large)
            chunks.append(chunk)
        return b"".join(chunks)

