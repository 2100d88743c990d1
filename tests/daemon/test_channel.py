"""Delivery through a Channel to local endpoints: retries, Retry-After, failures, drops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gatekeeper.notify.base import Channel, ChannelHooks, SendError
from gatekeeper.notify.lark import LarkNotifier
from gatekeeper.notify.slack import SlackNotifier
from gatekeeper.notify.webhook import WebhookNotifier
from tests.daemon.recorder import Recorder, Trickler
from tests.daemon.test_grouping import alert


class Outcomes:
    def __init__(self) -> None:
        self.marks: dict[int, str] = {}
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def hooks(self) -> ChannelHooks:
        def mark(ids: list[int], outcome: str, detail: str) -> None:
            with self.lock:
                self.marks.update({i: outcome for i in ids})

        def count(channel: str, outcome: str, n: int) -> None:
            with self.lock:
                self.counts[outcome] = self.counts.get(outcome, 0) + n

        return ChannelHooks(mark=mark, count=count)


@pytest.fixture
def outcomes() -> Outcomes:
    return Outcomes()


def channel(notifier: object, outcomes: Outcomes, **kw: object) -> Iterator[Channel]:
    opts = {"queue_size": 100, "group_wait": 0.05, "retries": 2, "retry_backoff": 0.05, **kw}
    ch = Channel(notifier, outcomes.hooks(), **opts)  # type: ignore[arg-type]
    ch.start()
    return ch  # type: ignore[return-value]


def test_500_is_retried_then_delivered(outcomes: Outcomes) -> None:
    rec = Recorder(script=lambda n: (500, {}, b"boom") if n < 2 else None)
    ch = channel(WebhookNotifier("w", rec.url, timeout=2, max_lines=10), outcomes)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "sent")
    assert rec.requests == 3 and len(rec.bodies) == 1
    assert rec.bodies[0]["groups"][0]["alerts"][0]["run"] == "a"
    ch.stop(), rec.close()


def test_always_500_is_counted_failed_and_the_channel_goes_on(outcomes: Outcomes) -> None:
    rec = Recorder(script=lambda n: (500, {}, b"boom") if n < 3 else None)
    ch = channel(WebhookNotifier("w", rec.url, timeout=2, max_lines=10), outcomes)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "failed")
    assert rec.requests == 3 and outcomes.counts == {"failed": 1}
    ch.offer(2, alert("b"))  # the next alert still goes out
    assert rec.wait(lambda: outcomes.marks.get(2) == "sent")
    ch.stop(), rec.close()


def test_timeout_is_retried_then_counted(outcomes: Outcomes) -> None:
    rec = Recorder(delay=1.0)
    ch = channel(WebhookNotifier("w", rec.url, timeout=0.2, max_lines=10), outcomes, retries=1)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "failed", timeout=10)
    assert rec.requests == 2 and outcomes.counts == {"failed": 1}
    ch.stop(), rec.close()


def test_slack_429_retry_after_is_honoured(outcomes: Outcomes) -> None:
    rec = Recorder(
        script=lambda n: (429, {"Retry-After": "1"}, b"rate_limited") if n == 0 else None
    )
    ch = channel(SlackNotifier("s", rec.url, timeout=2, max_lines=10), outcomes, retry_backoff=0.01)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "sent")
    assert rec.times[1] - rec.times[0] >= 0.95  # waited as told, not the 0.01s backoff
    ch.stop(), rec.close()


def test_lark_signed_card_is_accepted_and_alerts_of_one_batch_are_grouped(
    outcomes: Outcomes,
) -> None:
    rec = Recorder(lark_secret="s3cret")
    lark = LarkNotifier("l", rec.url, timeout=2, max_lines=10, secret="s3cret")
    ch = channel(lark, outcomes, group_wait=0.5)
    for i, run in enumerate(["a", "b", "c"]):
        ch.offer(i, alert(run))
    assert rec.wait(lambda: len(outcomes.marks) == 3)
    assert set(outcomes.marks.values()) == {"sent"} and rec.bad_signatures == 0
    assert len(rec.bodies) == 1  # one card for three runs failing the same way
    assert "on 3 runs" in rec.bodies[0]["card"]["elements"][0]["text"]["content"]
    ch.stop(), rec.close()


def test_lark_wrong_secret_is_a_failure_not_retried(outcomes: Outcomes) -> None:
    rec = Recorder(lark_secret="right")
    ch = channel(LarkNotifier("l", rec.url, timeout=2, max_lines=10, secret="wrong"), outcomes)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "failed")
    assert rec.bad_signatures == 1 and rec.requests == 1
    ch.stop(), rec.close()


def test_full_queue_drops_and_counts_without_blocking(outcomes: Outcomes) -> None:
    rec = Recorder(delay=0.5)
    ch = channel(
        WebhookNotifier("w", rec.url, timeout=5, max_lines=10),
        outcomes,
        queue_size=2,
        group_wait=0.0,
    )
    accepted = [ch.offer(i, alert(f"r{i}")) for i in range(20)]  # never waits on the endpoint
    dropped = accepted.count(False)
    assert dropped >= 15 and outcomes.counts.get("dropped") == dropped
    assert all(outcomes.marks[i] == "dropped" for i, ok in enumerate(accepted) if not ok)
    ch.stop(), rec.close()


HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 200\r\n\r\n"


@pytest.mark.parametrize(("prefix", "trickled"), [(b"", HEADERS), (HEADERS, b"x" * 200)])
def test_a_trickling_receiver_is_cut_at_the_request_deadline(
    prefix: bytes, trickled: bytes
) -> None:
    """timeout: 2s is the whole request: a receiver sending a byte every 0.3 s (each read
    in time, so a per-read timeout never fires) is cut at 2 s, not after 30."""
    rec = Trickler(trickled, prefix=prefix, period=0.3)
    hook = WebhookNotifier("w", rec.url, timeout=2, max_lines=10)
    started = time.monotonic()
    with pytest.raises(SendError, match="within 2s"):
        hook.post({"a": 1})
    took = time.monotonic() - started
    assert 1.9 <= took <= 2.6, took
    assert rec.wait_cut() <= 3.0  # the receiver saw the connection closed at the deadline
    hook.close(), rec.close()
