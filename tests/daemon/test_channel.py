"""Delivery through a Channel to local endpoints: retries, Retry-After, failures, drops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from gatekeeper.notify.base import SendError
from gatekeeper.notify.channel import Channel, ChannelHooks
from gatekeeper.notify.lark import LarkNotifier
from gatekeeper.notify.slack import SlackNotifier
from gatekeeper.notify.webhook import WebhookNotifier
from tests.daemon.harness import free_port
from tests.daemon.recorder import Recorder, Trickler
from tests.daemon.test_grouping import alert


class Outcomes:
    def __init__(self) -> None:
        self.marks: dict[int, str] = {}
        self.details: dict[int, str] = {}
        self.counts: dict[str, int] = {}
        self.retries = 0
        self.lock = threading.Lock()

    def hooks(self) -> ChannelHooks:
        def mark(ids: list[int], outcome: str, detail: str) -> None:
            with self.lock:
                self.marks.update({i: outcome for i in ids})
                self.details.update({i: detail for i in ids})

        def count(channel: str, outcome: str, n: int) -> None:
            with self.lock:
                self.counts[outcome] = self.counts.get(outcome, 0) + n

        def retried(channel: str) -> None:
            with self.lock:
                self.retries += 1

        return ChannelHooks(mark=mark, count=count, retried=retried)


@pytest.fixture
def outcomes() -> Outcomes:
    return Outcomes()


def channel(notifier: object, outcomes: Outcomes, **kw: object) -> Iterator[Channel]:
    opts = {"queue_size": 100, "group_wait": 0.05, "retry_for": 5.0, "retry_backoff": 0.05, **kw}
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


def test_always_500_is_retried_until_retry_for_then_expired_and_the_channel_goes_on(
    outcomes: Outcomes,
) -> None:
    up = threading.Event()
    rec = Recorder(script=lambda n: None if up.is_set() else (500, {}, b"boom"))
    ch = channel(WebhookNotifier("w", rec.url, timeout=2, max_lines=10), outcomes, retry_for=0.5)
    started = time.monotonic()
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "expired")
    assert 0.5 <= time.monotonic() - started < 2.0
    assert rec.requests >= 3 and outcomes.counts == {"expired": 1}
    assert outcomes.retries == rec.requests - 1  # every failed attempt but the last is a retry
    up.set()
    ch.offer(2, alert("b"))  # the next alert still goes out
    assert rec.wait(lambda: outcomes.marks.get(2) == "sent")
    ch.stop(), rec.close()


def test_timeout_is_retried_then_expired(outcomes: Outcomes) -> None:
    rec = Recorder(delay=1.0)
    ch = channel(WebhookNotifier("w", rec.url, timeout=0.2, max_lines=10), outcomes, retry_for=0.5)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "expired", timeout=10)
    assert rec.requests >= 2 and outcomes.counts == {"expired": 1}
    ch.stop(), rec.close()


def test_an_outage_loses_nothing_and_ends_in_one_grouped_message(outcomes: Outcomes) -> None:
    """The receiver's port refuses connections for 2 s; alerts offered before and during
    the outage are all delivered once, together, soon after it comes back."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    ch = channel(
        WebhookNotifier("w", url, timeout=1, max_lines=10),
        outcomes,
        retry_backoff=0.1,
        retry_backoff_max=0.4,
    )
    ch.offer(1, alert("a"))
    time.sleep(1.0)
    ch.offer(2, alert("b"))  # raised while the channel is retrying: joins the retry
    time.sleep(1.0)
    assert outcomes.marks == {} and ch.waiting() == 2 and outcomes.retries >= 3
    rec = Recorder(port=port)
    up = time.monotonic()
    assert rec.wait(lambda: outcomes.marks == {1: "sent", 2: "sent"})
    assert time.monotonic() - up < 1.5  # within one capped backoff of the recovery
    runs = [a["run"] for b in rec.bodies for g in b["groups"] for a in g["alerts"]]
    assert sorted(runs) == ["a", "b"] and len(rec.bodies) == 1
    ch.stop(), rec.close()


def test_stopping_while_retrying_leaves_the_alerts_pending(outcomes: Outcomes) -> None:
    ch = channel(
        WebhookNotifier("w", f"http://127.0.0.1:{free_port()}/x", timeout=1, max_lines=10),
        outcomes,
        retry_backoff=0.05,
    )
    ch.offer(1, alert("a"))
    time.sleep(0.5)
    ch.stop()
    assert outcomes.marks == {} and outcomes.retries >= 1  # offered again at the next start


def test_an_alert_older_than_retry_for_expires_when_offered(outcomes: Outcomes) -> None:
    rec = Recorder()
    ch = channel(WebhookNotifier("w", rec.url, timeout=1, max_lines=10), outcomes, retry_for=60)
    assert not ch.offer(1, alert("a"), created=time.time() - 61)
    assert ch.offer(2, alert("b"), created=time.time() - 59)
    assert rec.wait(lambda: outcomes.marks.get(2) == "sent")
    assert outcomes.marks[1] == "expired" and rec.requests == 1
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


def test_a_receiver_echoing_the_url_does_not_put_it_in_the_alert_log(outcomes: Outcomes) -> None:
    rec = Recorder(script=lambda n: (400, {}, f"unknown hook {url}".encode()))
    url = rec.url + "/s3cret-hook-id"
    ch = channel(WebhookNotifier("w", url, timeout=2, max_lines=10), outcomes)
    ch.offer(1, alert("a"))
    assert rec.wait(lambda: outcomes.marks.get(1) == "failed")
    assert "s3cret-hook-id" not in outcomes.details[1] and "[redacted]" in outcomes.details[1]
    ch.stop(), rec.close()


def test_alerts_taken_off_the_queue_still_count_as_waiting(outcomes: Outcomes) -> None:
    """`gatekeeper_notifications_waiting` reads `waiting()` at scrape time: alerts the
    worker took off the queue (grouped for group_wait, then being sent) count until their
    outcome is known. Before, a scrape in either moment read 0 (the daemon's outage test
    caught it under load)."""
    release = threading.Event()

    def slow(n: int) -> None:
        release.wait(10)  # the receiver holds the request: the alerts are being sent

    rec = Recorder(script=slow)
    ch = channel(WebhookNotifier("w", rec.url, timeout=5, max_lines=10), outcomes,
                 group_wait=0.3)
    ch.offer(1, alert("a")), ch.offer(2, alert("b"))
    seen = []
    end = time.monotonic() + 0.8  # 0.3 s grouping, then the post held
    while time.monotonic() < end:
        seen.append(ch.waiting())
        time.sleep(0.01)
    assert rec.requests == 1
    release.set()
    assert rec.wait(lambda: outcomes.marks.get(2) == "sent")
    assert set(seen) == {2}, seen
    assert rec.wait(lambda: ch.waiting() == 0)
    ch.stop(), rec.close()
