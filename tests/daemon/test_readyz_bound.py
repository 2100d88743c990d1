"""`/readyz` on a PostgreSQL state answers within ~1.5 s when the store stops answering
(a stalled network: connections stay open, nothing comes back), instead of waiting
behind a poll or lease call stuck on the shared connection; it turns ready again when
the store answers, and polling resumes from the committed cursor."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from gatekeeper.daemon.state_postgres import PROBE_DEADLINE
from tests.daemon.harness import DaemonProcess
from tests.daemon.test_postgres_serve import Proxy, pg_config


class StallingProxy(Proxy):
    """`stall()`: every connection stays open but nothing is relayed (nor refused);
    `flow()` relays again, what was held included."""

    def __init__(self, upstream_port: int):
        self.flowing = threading.Event()
        self.flowing.set()
        super().__init__(upstream_port)

    def stall(self) -> None:
        self.flowing.clear()

    def flow(self) -> None:
        self.flowing.set()

    def _relaying(self) -> None:
        self.flowing.wait()


def point(path: Path, step: int) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps({"train/step": step, "train/ppo_kl": 0.001, "train/loss": 1.0}) + "\n")


def test_readyz_answers_fast_while_the_store_stalls(tmp_path: Path, pg_url: str) -> None:
    base, db = pg_url.rsplit("/", 1)
    proxy = StallingProxy(int(base.rsplit(":", 1)[1]))
    url = f"{base.rsplit(':', 1)[0]}:{proxy.port}/{db}"
    run = tmp_path / "runs" / "r.jsonl"
    config = pg_config(tmp_path, url, [], interval=0.2, jitter=0, lease=3)
    point(run, 0)
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: daemon.run("r")["points"] == 2), daemon.tail()
        proxy.stall()
        point(run, 1)  # a poll's commit now waits on the stalled connection
        time.sleep(1.0)
        took = []
        for _ in range(3):
            t0 = time.monotonic()
            status = daemon.get("/readyz").status_code
            took.append(time.monotonic() - t0)
            assert status == 503, (status, took, daemon.tail())
        assert max(took) < PROBE_DEADLINE + 1.5, took  # not 10 s nor until the store is back
        assert daemon.get("/healthz").status_code == 200  # alive, only not ready
        proxy.flow()
        assert daemon.wait(lambda: daemon.get("/readyz").status_code == 200, 30), daemon.tail()
        assert daemon.wait(lambda: daemon.run("r")["points"] == 4, 30), daemon.tail()
    finally:
        proxy.flow()
        daemon.stop()
        proxy.cut()
