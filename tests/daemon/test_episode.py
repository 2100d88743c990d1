"""An alert's episode is "not passing": a real daemon child process posting to a webhook
receiver on loopback, one channel that lists only FAIL. A rule that fails, then goes ERROR
(its step logged twice in a miles record; a NaN after the failing point would not do it,
as the FAIL comes first in step order), pages once: the move among failing statuses is the same
episode, also across a kill -9 and a start on the same SQLite state; with
`repeat_interval`, the open episode is reminded while ERROR (on main before this, a
fail-only channel went silent), never paged anew."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.daemon.harness import DaemonProcess, write_config
from tests.daemon.recorder import Recorder


def _alerts(rec: Recorder, repeats: bool = False) -> list[tuple[str, str, str]]:
    return [
        (a["rule"], a["state"], a["status"]) for b in rec.bodies for g in b["groups"]
        for a in g["alerts"] if repeats or not a["repeat"]
    ]


def _append(path: Path, *rows: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def _record(path: Path, metric: str, *points: tuple[int, float]) -> None:
    """A miles metric record line (a step already logged makes the metric an ERROR)."""
    _append(path, {"metric": metric, "step_key": "train/step", "series": list(points)})


def _status(daemon: DaemonProcess, rule: str) -> str | None:
    run = daemon.run("r") or {}
    return next((r["status"] for r in run.get("rules", []) if r["rule"] == rule), None)


def test_a_fail_only_channel_pages_once_while_a_rule_moves_from_fail_to_error(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    config = write_config(tmp_path, [{
        "name": "hook", "kind": "webhook", "url": rec.url, "statuses": ["fail"],
        "group_wait": 0.1, "timeout": 2,
    }])
    run = tmp_path / "runs" / "r.jsonl"
    _record(run, "train/loss", (0, 1.0), (1, 0.9), (2, 0.8), (3, 0.7))
    _record(run, "train/ppo_kl", (0, 0.001))
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: _status(daemon, "kl-small") == "pass"), daemon.tail()
        _record(run, "train/ppo_kl", (1, 0.5))
        assert rec.wait(lambda: len(_alerts(rec)) == 1), daemon.tail()
        assert _alerts(rec) == [("kl-small", "firing", "fail")]

        _record(run, "train/ppo_kl", (1, 0.05))  # step 1 again: the metric is an ERROR
        assert daemon.wait(lambda: _status(daemon, "kl-small") == "error"), daemon.tail()
        daemon.kill9()  # the episode is in the SQLite state, not in this process
        daemon.start()
        _record(run, "train/ppo_kl", (2, 0.001), (3, 0.001))
        assert daemon.wait(lambda: daemon.run("r")["points"] >= 8), daemon.tail()
        _append(run, {"event": "end", "state": "finished"})
        assert daemon.wait(lambda: daemon.run("r")["ended"]), daemon.tail()
        time.sleep(1.5)  # a page would be posted within group_wait
        assert _status(daemon, "kl-small") == "error"
        assert _alerts(rec) == [("kl-small", "firing", "fail")], _alerts(rec)
    finally:
        assert daemon.stop() == 0
        rec.close()


def test_an_open_episode_is_reminded_through_error_and_a_kill_9_never_paged_anew(
    tmp_path: Path,
) -> None:
    rec = Recorder()
    config = write_config(tmp_path, [{
        "name": "hook", "kind": "webhook", "url": rec.url, "statuses": ["fail"],
        "group_wait": 0.1, "timeout": 2, "repeat_interval": 1,
    }])
    run = tmp_path / "runs" / "r.jsonl"
    _record(run, "train/loss", (0, 1.0))
    _record(run, "train/ppo_kl", (0, 0.5))
    daemon = DaemonProcess(config).start()
    try:
        assert rec.wait(lambda: len(_alerts(rec)) == 1), daemon.tail()
        _record(run, "train/ppo_kl", (0, 0.05))  # step 0 again: the metric is an ERROR
        assert daemon.wait(lambda: _status(daemon, "kl-small") == "error"), daemon.tail()
        daemon.kill9()
        daemon.start()
        # still the FAIL episode, now ERROR: reminded (repeat), never a new page
        assert rec.wait(lambda: ("kl-small", "firing", "error") in _alerts(rec, True)), (
            _alerts(rec, True), daemon.tail()
        )
        assert _alerts(rec) == [("kl-small", "firing", "fail")]
    finally:
        assert daemon.stop() == 0
        rec.close()
