"""The real daemon as a child process on a PostgreSQL state (a real cluster): it judges
and alerts as on SQLite, and a kill -9 loses no point and sends nothing twice."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import psycopg

from tests.daemon.harness import DaemonProcess, write_config, writer
from tests.daemon.recorder import Recorder
from tests.daemon.test_serve import firing_lines


def pg_config(tmp_path: Path, url: str, notifiers: list[dict], **poll: object) -> Path:
    path = write_config(tmp_path, notifiers, **poll)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "state": url}, indent=2))
    return path


def test_kill9_on_a_postgres_state_loses_no_point_and_sends_no_alert_twice(
    tmp_path: Path, pg_url: str
) -> None:
    hook = Recorder()
    notifiers = [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.2}]
    # a restarted daemon is a new replica (host:pid): it takes the runs over once the
    # dead one's leases expire, after `lease` seconds
    config = pg_config(tmp_path, pg_url, notifiers, interval=0.1, jitter=0, lease=2)
    daemon = DaemonProcess(config).start()
    runs = tmp_path / "runs"
    kids = [
        writer(runs / f"r{i}.jsonl", "--steps", "40", "--period", "0.1", "--bad-at",
               str(8 + 10 * i), "--end")
        for i in range(2)
    ]  # fmt: skip
    rng = random.Random(3)
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 1.2))
            daemon.kill9()
            daemon.start()
        for kid in kids:
            kid.wait(30)

        def stored() -> list[tuple[str, int, int, str]]:
            with psycopg.connect(pg_url) as conn:  # the state is in PostgreSQL, nowhere else
                rows = conn.execute("SELECT key, points, ended, status FROM gkd_runs ORDER BY key")
                return [(Path(k).stem, p, e, s) for k, p, e, s in rows.fetchall()]

        # every point read exactly once across 4 lives, each run judged whole
        assert daemon.wait(lambda: stored() == [(f"r{i}", 80, 1, "fail") for i in range(2)], 30), (
            stored(),
            daemon.tail(),
        )
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 2)
        time.sleep(1.0)
        assert firing_lines(hook.bodies) == {(f"r{i}", "kl-small", "firing"): 1 for i in range(2)}
        assert not (tmp_path / "state").exists() and not list(tmp_path.rglob("postgresql:"))
    finally:
        for kid in kids:
            kid.kill()
        daemon.stop()
        hook.close()
