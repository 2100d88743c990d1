"""The real daemon as a subprocess, watching runs that child processes write live."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

from gatekeeper.sources.jsonl.source import JsonlSource
from tests.daemon.harness import DaemonProcess, write_config, writer
from tests.daemon.recorder import Recorder


def firing_lines(bodies: list[dict]) -> Counter[tuple[str, str, str]]:
    """(run, rule, state) of every alert the generic webhook received."""
    return Counter(
        (a["run"], a["rule"], a["state"]) for b in bodies for g in b["groups"] for a in g["alerts"]
    )


def created_alerts(bodies: list[dict]) -> Counter[tuple[str, str, str]]:
    """(run, rule, state) of every alert the daemon created, however often delivered: an
    outbox row sent again after a kill -9 between the receiver's 200 and the row marked
    sent carries the same `key` (a digest of the stored payload, whose `time` is when the
    alert was made), while an alert made twice has two keys: what a receiver dedupes on."""
    made = {a["key"]: (a["run"], a["rule"], a["state"])
            for b in bodies for g in b["groups"] for a in g["alerts"]}
    return Counter(made.values())


def test_live_runs_are_judged_and_alerted_once_grouped_on_every_channel(tmp_path: Path) -> None:
    slack, lark, hook = Recorder(), Recorder(lark_secret="lark-s3cret"), Recorder()
    config = write_config(
        tmp_path,
        [
            {"name": "slack", "kind": "slack", "url_env": "T_SLACK", "group_wait": 1.5},
            {
                "name": "lark",
                "kind": "lark",
                "url_env": "T_LARK",
                "secret_env": "T_LARK_SECRET",
                "group_wait": 1.5,
            },
            {"name": "hook", "kind": "webhook", "url_env": "T_HOOK", "group_wait": 1.5},
        ],
    )
    daemon = DaemonProcess(
        config,
        {
            "T_SLACK": slack.url,
            "T_LARK": lark.url,
            "T_LARK_SECRET": "lark-s3cret",
            "T_HOOK": hook.url,
        },
    ).start()
    runs = tmp_path / "runs"
    kids = [
        writer(runs / "healthy.jsonl", "--steps", "12", "--end"),
        writer(runs / "bad-a.jsonl", "--steps", "12", "--bad-at", "4", "--end"),
        writer(runs / "bad-b.jsonl", "--steps", "12", "--bad-at", "4", "--end"),
    ]
    try:
        for kid in kids:
            kid.wait(30)
        assert daemon.wait(
            lambda: all(daemon.run(n)["ended"] for n in ("healthy", "bad-a", "bad-b"))
        ), daemon.tail()
        assert daemon.run("healthy")["status"] == "pass"
        bad = daemon.run("bad-a")
        assert bad["status"] == "fail" and bad["points"] == 24
        kl = next(r for r in bad["verdict"]["results"] if r["rule"] == "kl-small")
        assert kl["step"] == 4 and kl["value"] == 0.5
        assert hook.wait(lambda: sum(firing_lines(hook.bodies).values()) >= 2)
        time.sleep(1.0)  # nothing more may arrive
        assert firing_lines(hook.bodies) == {
            ("bad-a", "kl-small", "firing"): 1,
            ("bad-b", "kl-small", "firing"): 1,
        }
        assert len(hook.bodies) == 1 and len(hook.bodies[0]["groups"]) == 1  # grouped
        assert slack.wait(lambda: len(slack.bodies) == 1)
        section = slack.bodies[0]["blocks"][1]["text"]["text"]
        assert "kl/kl-small on 2 runs" in section and "bad-a" in section and "bad-b" in section
        assert lark.wait(lambda: len(lark.bodies) == 1) and lark.bad_signatures == 0
        assert "on 2 runs" in lark.bodies[0]["card"]["elements"][0]["text"]["content"]
        assert daemon.metric('gatekeeper_notifications_total{channel="lark",outcome="sent"}') == 2
    finally:
        for kid in kids:
            kid.kill()
        assert daemon.stop() == 0
        for rec in (slack, lark, hook):
            rec.close()


def test_kill9_at_random_moments_loses_no_point_no_verdict_and_sends_no_alert_twice(
    tmp_path: Path,
) -> None:
    kill9_at_random_moments(tmp_path, seed=6)


def kill9_at_random_moments(tmp: Path, seed: int, **poll: object) -> None:
    """Three runs written by child processes, each going bad at its own step, and the
    daemon killed with -9 five times at random moments: every point read once across
    its six lives, each run failed at its bad step, each alert made once. Delivery is at
    least once (docs/daemon.md, "Crash safety"): a kill between the receiver accepting a
    body and the row marked sent sends that same alert again, which CI's load made
    happen once; so alerts are counted as made, by their payload. `poll`: more poll
    settings (test_checkpoint's `checkpoint`)."""
    hook = Recorder()
    config = write_config(
        tmp,
        [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.2}],
        interval=0.1,
        jitter=0,
        **poll,
    )
    daemon = DaemonProcess(config).start()
    runs = tmp / "runs"
    kids = [
        writer(
            runs / f"r{i}.jsonl",
            "--steps",
            "60",
            "--period",
            "0.1",
            "--bad-at",
            str(10 + 12 * i),
            "--end",
        )
        for i in range(3)
    ]
    rng = random.Random(seed)
    try:
        for _ in range(5):
            time.sleep(rng.uniform(0.4, 1.2))
            daemon.kill9()
            daemon.start()
        for kid in kids:
            kid.wait(30)
        assert daemon.wait(lambda: all(daemon.run(f"r{i}")["ended"] for i in range(3)), 30), (
            daemon.tail()
        )
        for i in range(3):
            run = daemon.run(f"r{i}")
            assert run["points"] == 120, run  # every point read exactly once across 6 lives
            kl = next(r for r in run["verdict"]["results"] if r["rule"] == "kl-small")
            assert (run["status"], kl["step"]) == ("fail", 10 + 12 * i)
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 3)
        time.sleep(1.0)
        assert created_alerts(hook.bodies) == {
            (f"r{i}", "kl-small", "firing"): 1 for i in range(3)
        }
    finally:
        for kid in kids:
            kid.kill()
        daemon.stop()
        hook.close()


def test_an_alert_sent_again_after_a_kill_9_carries_the_same_key(tmp_path: Path) -> None:
    """The one at-least-once window (docs/daemon.md, "Crash safety"), made on purpose: the
    receiver holds the request while the daemon is killed, so the outbox rows stay pending
    and are sent again at the next start. Both deliveries carry each alert's `key` and the
    request's `Idempotency-Key` unchanged; the two runs' alerts have keys of their own."""
    hook = Recorder(delay=1.5)
    config = write_config(
        tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 1.0,
                    "timeout": 10}], interval=0.1, jitter=0,
    )  # fmt: skip
    runs = tmp_path / "runs"
    for name in ("r0", "r1"):  # both there at the first discovery: one grouped request
        rows = [{"train/step": s, "train/ppo_kl": 0.5 if s == 2 else 0.0} for s in range(4)]
        (runs / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    daemon = DaemonProcess(config).start()
    try:
        assert hook.wait(lambda: hook.requests == 1), daemon.tail()
        daemon.kill9()  # the receiver has the body; its answer never reaches the daemon
        assert hook.wait(lambda: len(hook.bodies) == 1)
        daemon.start()
        assert hook.wait(lambda: len(hook.bodies) == 2), daemon.tail()
        first, again = ([(a["run"], a["key"]) for g in b["groups"] for a in g["alerts"]]
                        for b in hook.bodies)  # fmt: skip
        assert sorted(first) == sorted(again) and {r for r, _ in first} == {"r0", "r1"}
        assert len({k for _, k in first}) == 2
        assert hook.idempotency[0] == hook.idempotency[1] is not None
        assert created_alerts(hook.bodies) == {(r, "kl-small", "firing"): 1 for r in ("r0", "r1")}
        time.sleep(1.0)
        assert len(hook.bodies) == 2  # the second delivery was marked sent
    finally:
        assert daemon.stop() == 0
        hook.close()


def test_a_corrupt_state_file_stops_the_daemon_with_a_clear_error(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    state = tmp_path / "state" / "gatekeeper.db"
    state.parent.mkdir()
    state.write_bytes(b"\x00garbage" * 1000)
    daemon = DaemonProcess(config).start(wait=False)
    assert daemon.proc is not None and daemon.proc.wait(20) == 2
    assert "gatekeeper.db is unusable" in daemon.tail() and "move the file aside" in daemon.tail()
    assert state.read_bytes().startswith(b"\x00garbage")


def test_a_hung_source_and_a_failing_notifier_do_not_stop_the_loop(tmp_path: Path) -> None:
    hook = Recorder(script=lambda n: (500, {}, b"down"))  # the endpoint is broken for good
    config = write_config(
        tmp_path,
        [
            {
                "name": "hook",
                "kind": "webhook",
                "url": hook.url,
                "group_wait": 0.1,
                "retry_for": 0.5,
                "retry_backoff": 0.05,
            }
        ],
        timeout=0.5,
    )
    cfg = json.loads(config.read_text())  # plus a run directory whose record file hangs
    cfg["targets"].append({"source": "runs/stuck", "policies": ["kl.yaml"]})
    config.write_text(json.dumps(cfg))
    runs = tmp_path / "runs"
    (runs / "stuck").mkdir()
    # A FIFO used to block the poll like a hung NFS mount; since issue 11 only regular files
    # are read, so it fails at once — the loop must carry on either way.
    os.mkfifo(runs / "stuck" / "rank0.jsonl")
    daemon = DaemonProcess(config).start()
    kid = writer(runs / "bad.jsonl", "--steps", "6", "--bad-at", "2", "--end")
    try:
        kid.wait(30)
        assert daemon.wait(lambda: daemon.run("bad")["ended"]), daemon.tail()
        assert daemon.run("bad")["status"] == "fail"
        # The stuck run turns `error` after poll.error_after failed polls and alerts too.
        assert daemon.wait(
            lambda: (
                daemon.metric('gatekeeper_notifications_total{channel="hook",outcome="expired"}')
                == 2
            )
        ), daemon.tail()
        assert hook.requests >= 3  # retried with backoff until retry_for, then expired
        assert daemon.metric('gatekeeper_notification_retries_total{channel="hook"}') >= 2
        stuck = daemon.run("stuck")
        assert stuck["errors"] >= 1 and "not a regular file" in stuck["last_error"]
        log = daemon.api("/api/alerts")["alerts"]
        got = {(a["outcome"], a["payload"]["run"], a["payload"]["rule"]) for a in log}
        assert got == {("expired", "bad", "kl-small"), ("expired", "stuck", "source-readable")}
        assert all("500" in a["detail"] for a in log)
    finally:
        kid.kill()
        assert daemon.stop() == 0
        hook.close()


def test_a_failing_rule_turning_error_is_not_resolved_on_a_fail_only_channel(
    tmp_path: Path,
) -> None:
    fail_only, both = Recorder(), Recorder()
    config = write_config(
        tmp_path,
        [
            {
                "name": "fail-only",
                "kind": "webhook",
                "url": fail_only.url,
                "statuses": ["fail"],
                "group_wait": 0.1,
            },
            {"name": "both", "kind": "webhook", "url": both.url, "group_wait": 0.1},
        ],
    )
    run = tmp_path / "runs" / "worse.jsonl"
    daemon = DaemonProcess(config).start()
    try:
        record = '{{"metric": "{}", "step_key": "train/step", "series": [[0, {}]]}}\n'
        with open(run, "a") as fh:
            fh.write(record.format("train/ppo_kl", 0.5) + record.format("train/loss", 1.0))
        assert fail_only.wait(lambda: len(fail_only.bodies) == 1), daemon.tail()
        # the failing rule gets worse: its step logged twice makes the metric an ERROR (a
        # NaN after the violation would not: the FAIL at step 0 comes first in step order)
        with open(run, "a") as fh:
            fh.write(record.format("train/ppo_kl", 0.05))

        def kl_status() -> str:
            rules = daemon.run("worse")["rules"]
            return next(r["status"] for r in rules if r["rule"] == "kl-small")

        assert daemon.wait(lambda: kl_status() == "error"), daemon.tail()
        time.sleep(1.0)  # polled several times since
        assert firing_lines(fail_only.bodies) == {("worse", "kl-small", "firing"): 1}
        assert firing_lines(both.bodies) == {("worse", "kl-small", "firing"): 1}
    finally:
        assert daemon.stop() == 0
        fail_only.close(), both.close()


def test_a_duplicate_step_after_a_restart_is_still_found(tmp_path: Path) -> None:
    """The daemon saves each record metric's steps in its cursor: a step logged again
    while it was down is an error on that metric's rules once it is back, without
    re-reading the points it had (as `check` on the whole record says)."""
    config = write_config(tmp_path, interval=0.1, jitter=0)
    run = tmp_path / "runs" / "rec.jsonl"
    lines = [
        {"metric": m, "series": [[s, 0.0] for s in range(3)]}
        for m in ("train/ppo_kl", "train/loss")
    ]
    run.write_text("".join(json.dumps(line) + "\n" for line in lines))
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: daemon.run("rec")["points"] == 6), daemon.tail()
        assert daemon.run("rec")["status"] == "pass"
    finally:
        assert daemon.stop() == 0
    with open(run, "a") as fh:  # a retried step, logged while the daemon was down
        fh.write(json.dumps({"metric": "train/ppo_kl", "series": [[1, 0.0], [3, 0.0]]}) + "\n")
        fh.write('{"event": "end", "state": "finished"}\n')
    daemon.start()
    try:
        assert daemon.wait(lambda: daemon.run("rec")["ended"]), daemon.tail()
        rec = daemon.run("rec")
        assert (rec["status"], rec["points"]) == ("error", 8)  # the 6 were not read again
        results = {r["rule"]: r for r in rec["verdict"]["results"]}
        assert results["kl-small"]["status"] == "error"
        reason = "duplicate train/step 1 (2 points); a record holds one point per step"
        assert reason in results["kl-small"]["message"]
        assert results["loss-finite"]["status"] == "pass"
        assert JsonlSource(str(run)).read().metric_errors == {"train/ppo_kl": reason}  # check's
    finally:
        assert daemon.stop() == 0


def test_sigusr1_writes_every_threads_stack_to_the_log_and_the_daemon_goes_on(
    tmp_path: Path,
) -> None:
    """The operator's look into a daemon that stopped polling (before: SIGUSR1's default
    action ended the daemon)."""
    daemon = DaemonProcess(write_config(tmp_path)).start()
    try:
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGUSR1)

        def dumped() -> bool:  # main, the dispatcher, the HTTP server's threads...
            dump = daemon.tail(50_000)
            return dump.count("(most recent call first)") >= 3 and "gatekeeper/daemon/" in dump

        assert daemon.wait(dumped), daemon.tail()
        time.sleep(0.5)
        assert daemon.get("/readyz").status_code == 200
    finally:
        assert daemon.stop() == 0
