"""The background channel that delivers one notifier's alerts, through outages.

A `Channel` owns one notifier: a bounded queue (a full queue drops the alert and counts
it, so a slow chat never stalls polling) and a worker thread that waits `group_wait` to
collect alerts, groups them, respects the rate limits and posts. A failure the receiver
may recover from (refused, timed out, 429, 5xx) is retried with doubling pauses up to
`retry_backoff_max` (a Retry-After answer wins) until the alert is `retry_for` old,
counted from when it was committed, so the horizon holds across restarts: the alert
stays `pending` in the outbox meanwhile and a restarted daemon offers it again. Alerts
raised while a channel is retrying join the retry, so an outage ends in one grouped
message. Past the horizon an alert is `expired`; a refusal (other 4xx) fails it at once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.errors import one_line
from gatekeeper.notify.base import Notifier, RateLimiter, SendError
from gatekeeper.notify.grouping import group_alerts

log = logging.getLogger("gatekeeper.notify")


@dataclass
class ChannelHooks:
    """Where a channel reports outcomes (state store, metrics)."""

    mark: Callable[[list[int], str, str], None]  # ids, outcome, detail
    count: Callable[[str, str, int], None]  # channel, outcome, n
    retried: Callable[[str], None] = field(default=lambda channel: None)  # one failed attempt


@dataclass
class Pending:
    id: int
    payload: dict[str, Any]
    created: float  # wall-clock time the alert was committed: its retry horizon starts here

    def label(self, channel: str) -> str:
        """What the log says of the alert: run, rule and channel (never a URL or secret:
        the channel is named by its config name), each on one line."""
        p = self.payload
        rule = f"{p.get('policy')}/{p.get('rule')}"
        return one_line(f"run {p.get('run')}, rule {rule}, channel {channel}")


# An operator reads these at INFO: what was raised and sent; what never arrived, louder.
_LEVEL = {"sent": logging.INFO, "failed": logging.WARNING, "expired": logging.WARNING,
          "dropped": logging.WARNING}


class Channel:
    """A notifier with its bounded queue, retry batch and worker thread."""

    def __init__(
        self,
        notifier: Notifier,
        hooks: ChannelHooks,
        *,
        queue_size: int,
        group_wait: float,
        retry_for: float,
        retry_backoff: float,
        retry_backoff_max: float = 60.0,
    ):
        self.notifier = notifier
        self.hooks = hooks
        self.queue: queue.Queue[Pending] = queue.Queue(maxsize=queue_size)
        self.queue_size = queue_size
        self.group_wait = group_wait
        self.retry_for = retry_for
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.limiter = RateLimiter(notifier.limits)
        self.retrying: list[Pending] = []  # failed, waiting for the next attempt
        self.in_hand: list[Pending] = []  # taken off the queue: being grouped or sent
        self.failures = 0  # consecutive failed attempts of the retry batch
        self.retry_at = 0.0  # monotonic time of the next attempt
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"notify-{notifier.name}", daemon=True
        )

    @property
    def name(self) -> str:
        return self.notifier.name

    def waiting(self) -> int:
        """Alerts queued or waiting for a retry."""
        return self.queue.qsize() + len(self.retrying) + len(self.in_hand)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker; undelivered alerts stay pending for the next start."""
        self._stop.set()
        self._thread.join(timeout)
        self.notifier.close()

    def offer(self, alert_id: int, payload: dict[str, Any], created: float | None = None) -> bool:
        """Queue an alert; a full queue drops it (counted, recorded), never blocks. An alert
        already past its retry horizon (offered again after a long stop) expires."""
        item = Pending(alert_id, payload, time.time() if created is None else created)
        state = str(payload.get("state", "firing")) + (" again" if payload.get("repeat") else "")
        again = "" if created is None else " (kept from before the restart)"
        log.info("alert %s: %s%s", state, item.label(self.name), again)
        if self.retry_for > 0 and self._expired(item, time.time()):
            self._finish([item], "expired", f"older than retry_for ({self.retry_for:g}s)")
            return False
        try:
            self.queue.put_nowait(item)
            return True
        except queue.Full:
            self._finish([item], "dropped", "queue full")
            return False

    # ---- the worker ---------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.retrying:
                wait = self.retry_at - time.monotonic()
                self._absorb(min(max(wait, 0.0), 0.2))
                if wait > 0:
                    continue
                batch = self.in_hand = self.retrying
                self.retrying = []
            else:
                batch = self._collect()
                if not batch:
                    continue
            try:
                self._deliver(batch)
            except Exception:  # a bug in rendering must not kill the channel
                if self._stop.is_set():
                    return  # stopping: the alerts stay pending
                log.exception("notifier %s: delivery failed", self.name)
                self._finish(batch, "failed", "internal error")
            finally:
                self.in_hand = []

    def _collect(self) -> list[Pending]:
        """The next batch: the first alert, then whatever arrives within group_wait."""
        batch = self.in_hand = []  # counted as waiting while it groups
        try:
            batch.append(self.queue.get(timeout=0.2))
        except queue.Empty:
            return []
        deadline = time.monotonic() + self.group_wait
        while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
            try:
                batch.append(self.queue.get(timeout=min(left, 0.2)))
            except queue.Empty:
                continue
        batch.extend(self._drain(len(batch) + self.queue_size))
        return batch

    def _absorb(self, wait: float) -> None:
        """While retrying, move new alerts into the retry batch (bounded by queue_size,
        so a long outage holds at most twice that many; beyond, the queue drops)."""
        room = self.queue_size - len(self.retrying)
        if room <= 0:
            self._stop.wait(wait)
            return
        try:
            first = self.queue.get(timeout=wait) if wait > 0 else self.queue.get_nowait()
        except queue.Empty:
            return
        self.retrying.append(first)
        self.retrying.extend(self._drain(room - 1))

    def _drain(self, limit: int) -> list[Pending]:
        out: list[Pending] = []
        while len(out) < limit:
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return out

    def _deliver(self, batch: list[Pending]) -> None:
        bodies = self.notifier.render(group_alerts(p.payload for p in batch))
        try:
            for body in bodies:  # renderers give one body per batch
                self._post(body)
        except SendError as exc:
            self._failed(batch, exc)
            return
        self.failures = 0
        self._finish(batch, "sent", "")

    def _post(self, body: dict[str, Any]) -> None:
        while (wait := self.limiter.delay()) > 0:
            time.sleep(min(wait, 1.0))
        self.limiter.record()
        self.notifier.post(body)

    def _failed(self, batch: list[Pending], exc: SendError) -> None:
        self.failures += 1
        error = self.notifier.scrub(str(exc))  # it goes to the log and the alert log
        log.warning("notifier %s: attempt %d failed: %s", self.name, self.failures, error)
        if not exc.retryable:
            self.failures = 0
            self._finish(batch, "failed", error)
            return
        if self._stop.is_set():
            return  # stopping: the alerts stay pending and are offered again at start
        now = time.time()
        expired = [p for p in batch if self._expired(p, now)]
        if expired:
            self._finish(expired, "expired", f"undelivered for retry_for ({error})")
        self.retrying = [p for p in batch if not self._expired(p, now)]
        self.in_hand = []  # counted in `retrying` from here
        if not self.retrying:
            self.failures = 0
            return
        self.hooks.retried(self.name)
        pause = min(self.retry_backoff * 2 ** (self.failures - 1), self.retry_backoff_max)
        if exc.retry_after is not None:
            pause = min(exc.retry_after, 3600.0)
        self.retry_at = time.monotonic() + pause

    def _expired(self, item: Pending, now: float) -> bool:
        return now - item.created >= self.retry_for

    def _finish(self, items: list[Pending], outcome: str, detail: str) -> None:
        level = _LEVEL.get(outcome, logging.INFO)
        for p in items:
            why = f": {detail}" if detail else ""
            log.log(level, "alert %s %s: %s%s", p.payload.get("state"), outcome,
                    p.label(self.name), why)
        self.hooks.mark([p.id for p in items], outcome, detail)
        self.hooks.count(self.name, outcome, len(items))
