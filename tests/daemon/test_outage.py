"""A receiver outage of 16 capped retry pauses, with the daemon restarted twice during it
(SIGTERM, then kill -9): every alert raised before and during the outage is delivered once
after it."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from tests.daemon.harness import DaemonProcess, free_port, write_config, writer
from tests.daemon.recorder import Recorder, Trickler

# The issue asked for 30 s against the default pauses: far beyond the old ~7 s of retries.
# What matters is the outage in retry pauses, not in seconds: with the pauses scaled down
# (0.1 s doubling up to 0.5 s) an outage of 8 s spans 16 capped pauses, as 30 s spans 15 at
# the 2 s cap the test used before, and the test takes 10 s of wall time instead of 35.
BACKOFF, BACKOFF_MAX = 0.1, 0.5
OUTAGE = 16 * BACKOFF_MAX
RETRIES = 'gatekeeper_notification_retries_total{channel="hook"}'  # in this life


def delivered(rec: Recorder) -> Counter[tuple[str, str, str]]:
    return Counter(
        (a["run"], a["rule"], a["state"])
        for b in rec.bodies
        for g in b["groups"]
        for a in g["alerts"]
    )


def test_a_receiver_outage_across_two_restarts_loses_no_alert_and_sends_none_twice(
    tmp_path: Path,
) -> None:
    port = free_port()  # nobody listens until the outage ends: connections are refused
    config = write_config(
        tmp_path,
        [
            {
                "name": "hook",
                "kind": "webhook",
                "url": f"http://127.0.0.1:{port}/hook",
                "group_wait": 0.2,
                "timeout": 2,
                "retry_backoff": BACKOFF,
                "retry_backoff_max": BACKOFF_MAX,
            }
        ],
    )
    runs = tmp_path / "runs"
    started = time.monotonic()
    daemon = DaemonProcess(config).start()
    kids = []
    rec: Recorder | None = None

    def pending() -> int:
        return sum(1 for a in daemon.api("/api/alerts")["alerts"] if a["outcome"] == "pending")

    try:
        for i, restart in enumerate(("sigterm", "kill9", None)):
            kids.append(writer(runs / f"r{i}.jsonl", "--steps", "6", "--bad-at", "2", "--end"))
            assert daemon.wait(lambda n=i + 1: pending() == n, 15), daemon.tail()
            assert daemon.wait(lambda: daemon.metric(RETRIES) >= 3, 10), daemon.tail()
            assert daemon.metric('gatekeeper_notifications_waiting{channel="hook"}') == i + 1
            if restart == "sigterm":
                assert daemon.stop() == 0
                daemon.start()
            elif restart == "kill9":
                daemon.kill9()
                daemon.start()
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - started)))
        assert pending() == 3 and daemon.metric("gatekeeper_notifications_total") == 0
        rec = Recorder(port=port)  # the receiver is back
        back = time.monotonic()
        assert rec.wait(lambda: sum(delivered(rec).values()) >= 3, 15), daemon.tail()
        took = time.monotonic() - back
        time.sleep(3 * BACKOFF_MAX)  # nothing more may arrive
        assert delivered(rec) == {(f"r{i}", "kl-small", "firing"): 1 for i in range(3)}
        assert took < 4 * BACKOFF_MAX, took  # a capped pause after the recovery, + slack
        outcomes = [a["outcome"] for a in daemon.api("/api/alerts")["alerts"]]
        assert outcomes == ["sent"] * 3
        print(
            f"\noutage {back - started:.1f}s, 2 restarts: 3 alerts in {len(rec.bodies)} "
            f"message(s), delivered {took:.2f}s after the receiver came back"
        )
    finally:
        for kid in kids:
            kid.kill()
        assert daemon.stop() == 0
        if rec is not None:
            rec.close()


def test_the_daemon_cuts_a_trickling_receiver_at_the_request_deadline(tmp_path: Path) -> None:
    """A receiver answering one byte every 0.3 s would hold the request for 20 s; with
    `timeout: 1s` the daemon hangs up at 1 s, retries, and expires the alert at retry_for."""
    trickler = Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", period=0.3, limit=20)
    config = write_config(
        tmp_path,
        [
            {
                "name": "hook",
                "kind": "webhook",
                "url": trickler.url,
                "group_wait": 0.1,
                "timeout": 1,
                "retry_for": 2,
                "retry_backoff": 0.1,
            }
        ],
    )
    daemon = DaemonProcess(config).start()
    kid = writer(tmp_path / "runs" / "bad.jsonl", "--steps", "4", "--bad-at", "1", "--end")
    try:
        kid.wait(30)
        assert daemon.wait(
            lambda: (
                daemon.metric('gatekeeper_notifications_total{channel="hook",outcome="expired"}')
                == 1
            ),
            15,
        ), daemon.tail()
        (entry,) = daemon.api("/api/alerts")["alerts"]
        assert entry["outcome"] == "expired" and "no complete answer within 1s" in entry["detail"]
        assert trickler.cut_after and max(trickler.cut_after) < 1.8, trickler.cut_after
    finally:
        kid.kill()
        assert daemon.stop() == 0
        trickler.close()
