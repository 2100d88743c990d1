"""A run the daemon cannot read is an error that alerts, never a run left pending."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import DaemonProcess, write_config
from tests.daemon.recorder import Recorder
from tests.daemon.sources import open_test_source


def alerts_of(rec: Recorder) -> list[tuple[str, str, str, str]]:
    """(run, rule, status, state) of every alert a generic webhook received."""
    return [
        (a["run"], a["rule"], a["status"], a["state"])
        for b in rec.bodies
        for g in b["groups"]
        for a in g["alerts"]
    ]


def test_a_run_with_a_malformed_record_is_an_error_that_alerts_once(tmp_path: Path) -> None:
    hook = Recorder()
    config = write_config(
        tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.2}]
    )
    runs = tmp_path / "runs"

    (runs / "garbled.jsonl").write_text(
        json.dumps({"train/step": 0, "train/ppo_kl": 0.001, "train/loss": 1.0})
        + "\nthis is not json\n"
    )
    daemon = DaemonProcess(config).start()
    try:
        assert hook.wait(lambda: len(alerts_of(hook)) >= 1), daemon.tail()
        run = daemon.run("garbled")
        assert run["status"] == "error" and "not valid JSON" in run["last_error"]
        assert alerts_of(hook) == [("garbled", "source-readable", "error", "firing")]
        message = hook.bodies[0]["groups"][0]["alerts"][0]["message"]
        assert "cannot be read" in message and "garbled.jsonl:2" in message
        assert daemon.metric('gatekeeper_runs{status="error"}') == 1
        # 4 = error (exporter.STATUS_CODES): the daemon's own policy, gatekeeper
        assert daemon.metric('gatekeeper_policy_status{policy="gatekeeper",run="garbled"}') == 4
        time.sleep(1.5)  # polled again and again: still one alert (repeat_interval is 4h)
        assert len(alerts_of(hook)) == 1 and daemon.run("garbled")["errors"] >= 2
    finally:
        assert daemon.stop() == 0
        hook.close()


def test_a_run_unreadable_for_error_after_polls_alerts_and_resolves_when_readable(
    tmp_path: Path,
) -> None:
    hook = Recorder()
    path = write_config(
        tmp_path,
        [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.1}],
        error_after=2,
        backoff_max=0.5,
    )
    run = tmp_path / "runs" / "flaky.jsonl"
    run.write_text(json.dumps({"train/step": 0, "train/ppo_kl": 0.001, "train/loss": 1.0}) + "\n")
    broken = Path(str(run) + ".broken")
    broken.touch()
    daemon = Daemon(load_config(str(path)), open_test_source)
    daemon.start()
    try:
        assert hook.wait(lambda: len(alerts_of(hook)) == 1)
        assert alerts_of(hook) == [("flaky", "source-readable", "error", "firing")]
        (watcher,) = daemon.scheduler.snapshot()
        assert watcher.status == "error" and watcher.errors >= 2
        broken.unlink()  # readable again: resolved, and judged on its data
        assert hook.wait(lambda: len(alerts_of(hook)) == 2)
        assert alerts_of(hook)[1] == ("flaky", "source-readable", "pass", "resolved")
        assert watcher.status == "pass" and watcher.points == 2, (watcher.status, watcher.points)
    finally:
        daemon.stop()
        hook.close()


def test_an_unreadable_run_stays_error_across_a_restart_and_resolves_once(tmp_path: Path) -> None:
    hook = Recorder()
    path = write_config(
        tmp_path,
        [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.1}],
        error_after=1,
        backoff_max=0.5,
    )
    run = tmp_path / "runs" / "flaky.jsonl"
    run.write_text(json.dumps({"train/step": 0, "train/ppo_kl": 0.001, "train/loss": 1.0}) + "\n")
    broken = Path(str(run) + ".broken")
    broken.touch()
    config = load_config(str(path))
    daemon = Daemon(config, open_test_source)
    daemon.start()
    try:
        assert hook.wait(lambda: len(alerts_of(hook)) == 1)
        daemon.stop()
        broken.unlink()
        daemon = Daemon(config, open_test_source)
        assert daemon.store.load_runs()[str(run)].status == "error"  # committed as such
        daemon.start()
        assert hook.wait(lambda: len(alerts_of(hook)) == 2)
        time.sleep(1.0)
        assert alerts_of(hook) == [
            ("flaky", "source-readable", "error", "firing"),
            ("flaky", "source-readable", "pass", "resolved"),
        ]
        (watcher,) = daemon.scheduler.snapshot()
        assert watcher.status == "pass" and watcher.points == 2
    finally:
        daemon.stop()
        hook.close()
