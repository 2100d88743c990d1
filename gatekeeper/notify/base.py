"""The notifier contract and the background channel that delivers for it.

A `Notifier` turns groups of alerts into request bodies (`render`) and posts one
(`post`), raising `SendError` on failure. A `Channel` owns one notifier: a bounded
queue (a full queue drops the alert and counts it, so a slow chat never stalls polling),
a worker thread that waits `group_wait` to collect alerts, groups them, respects the
channel's rate limits, retries with backoff (honouring Retry-After), and records each
alert's outcome in the state store.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from gatekeeper.notify import deadline
from gatekeeper.notify.grouping import Group, group_alerts

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
    """One chat/webhook destination. Subclasses set `kind` and `limits`."""

    kind: ClassVar[str]
    limits: ClassVar[tuple[Limit, ...]] = ()

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
                resp = self.client.post(self._url, json=body)
        except httpx.TimeoutException:
            raise SendError(f"{self.name}: no complete answer within {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise SendError(f"{self.name}: {type(exc).__name__}") from None
        self.check_response(resp)

    def check_response(self, resp: httpx.Response) -> None:
        if resp.status_code == 429:
            raise SendError(f"{self.name}: rate limited (429)", retry_after=_retry_after(resp))
        if resp.status_code >= 500:
            raise SendError(f"{self.name}: server error {resp.status_code}")
        if resp.status_code >= 400:
            raise SendError(
                f"{self.name}: rejected with {resp.status_code}: {resp.text[:200]}", retryable=False
            )

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


@dataclass
class ChannelHooks:
    """Where a channel reports outcomes (state store, metrics)."""

    mark: Callable[[list[int], str, str], None]  # ids, outcome, detail
    count: Callable[[str, str, int], None]  # channel, outcome, n


class Channel:
    """A notifier with its bounded queue and worker thread."""

    def __init__(
        self,
        notifier: Notifier,
        hooks: ChannelHooks,
        *,
        queue_size: int,
        group_wait: float,
        retries: int,
        retry_backoff: float,
    ):
        self.notifier = notifier
        self.hooks = hooks
        self.queue: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue(maxsize=queue_size)
        self.group_wait = group_wait
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.limiter = RateLimiter(notifier.limits)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"notify-{notifier.name}", daemon=True
        )

    @property
    def name(self) -> str:
        return self.notifier.name

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        self.notifier.close()

    def offer(self, alert_id: int, payload: dict[str, Any]) -> bool:
        """Queue an alert; a full queue drops it (counted, recorded), never blocks."""
        try:
            self.queue.put_nowait((alert_id, payload))
            return True
        except queue.Full:
            self.hooks.mark([alert_id], "dropped", "queue full")
            self.hooks.count(self.name, "dropped", 1)
            return False

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                first = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            deadline = time.monotonic() + self.group_wait
            while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
                try:
                    batch.append(self.queue.get(timeout=min(left, 0.2)))
                except queue.Empty:
                    continue
            while True:  # drain what arrived meanwhile so it groups with the batch
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._deliver(batch)
            except Exception:  # a bug in rendering must not kill the channel
                log.exception("notifier %s: delivery failed", self.name)
                self.hooks.mark([i for i, _ in batch], "failed", "internal error")
                self.hooks.count(self.name, "failed", len(batch))

    def _deliver(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        groups = group_alerts(p for _, p in batch)
        ids = [i for i, _ in batch]
        bodies = self.notifier.render(groups)
        error = ""
        for body in bodies:
            error = self._send(body) or error
        outcome = "failed" if error else "sent"
        self.hooks.mark(ids, outcome, error)
        self.hooks.count(self.name, outcome, len(ids))

    def _send(self, body: dict[str, Any]) -> str:
        """Post with rate limiting and retries; the last error text, or '' on success."""
        error = ""
        for attempt in range(self.retries + 1):
            while (wait := self.limiter.delay()) > 0:
                time.sleep(min(wait, 1.0))
            self.limiter.record()
            try:
                self.notifier.post(body)
                return ""
            except SendError as exc:
                error = str(exc)
                log.warning("notifier %s: attempt %d failed: %s", self.name, attempt + 1, error)
                if not exc.retryable or attempt == self.retries or self._stop.is_set():
                    break
                pause = (
                    exc.retry_after
                    if exc.retry_after is not None
                    else self.retry_backoff * 2**attempt
                )
                self._stop.wait(min(pause, 300.0))
        return error
