"""The due queue the daemon's tick takes polls from, and the dispatch built on it.

The timing mirrors an APScheduler 3.10 interval job with `coalesce=True` and a jitter
(apscheduler/triggers/interval.py: next = previous due + interval, then + uniform(0,
jitter); missed due times run once), which dispatched each run's polls before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.due import DueQueue
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import write_config
from tests.daemon.sources import open_test_source
from tests.helpers import wait_until


def test_a_run_is_due_once_an_interval_and_its_missed_polls_coalesce() -> None:
    q = DueQueue()
    q.add("a", 10.0, 5.0)
    q.add("b", 12.0, 1.0)
    assert q.pop_due(9.9) == []
    assert q.pop_due(10.0) == [("a", 10.0)]
    assert q.pop_due(14.9) == [("b", 12.0)]  # b's 13 and 14 were missed: one poll
    assert q.pop_due(15.0) == [("a", 15.0), ("b", 15.0)]  # b next due after 14.9: 15
    assert q.pop_due(15.0) == []  # each is due again one interval later, past now
    assert q.pop_due(16.0) == [("b", 16.0)]


def test_a_discarded_run_is_not_due_and_one_added_again_keeps_only_its_new_time() -> None:
    q = DueQueue()
    q.add("a", 1.0, 10.0)
    q.discard("a")
    assert "a" not in q and len(q) == 0
    assert q.pop_due(100.0) == []
    q.add("a", 5.0, 10.0)
    q.add("a", 7.0, 10.0)  # re-added: the entry at 5 is stale
    assert q.pop_due(6.0) == []
    assert q.pop_due(7.0) == [("a", 7.0)] and "a" in q


def test_the_jitter_delays_each_next_poll_by_at_most_its_value() -> None:
    q = DueQueue(jitter=2.0)
    for i in range(200):
        q.add(f"r{i}", 0.0, 10.0)
    q.pop_due(0.0)
    nexts = [d for d, _ in q._heap]
    assert all(10.0 <= d <= 12.0 for d in nexts)
    assert max(nexts) - min(nexts) > 1.0  # spread, not one fixed delay


def test_removed_runs_do_not_grow_the_heap() -> None:
    q = DueQueue()
    for i in range(10_000):
        q.add(f"r{i}", 1e9 + i, 1e6)  # due long after: never popped by time
        q.discard(f"r{i}")
    q.add("kept", 1e5, 1e6)
    assert q.pop_due(1e5) == [("kept", 1e5)]
    assert len(q._heap) < 100  # compacted once the stale entries outnumber the live


def test_polls_of_one_run_never_overlap_and_other_runs_go_on(tmp_path: Path) -> None:
    """A run whose poll outlasts its interval is not dispatched again until it returns
    (its due times pass), while the other runs keep their interval."""
    config = load_config(str(write_config(tmp_path, interval=0.1, jitter=0, workers=4)))
    for name in ("slow", "fast"):
        (tmp_path / "runs" / f"{name}.jsonl").write_text('{"step": 0, "train/ppo_kl": 0.0}\n')
    daemon = Daemon(config, open_test_source)
    sched = daemon.scheduler
    lock = threading.Lock()
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    polls: dict[str, list[float]] = {}
    real = sched._poll_one

    def counted(key: str, watcher: object) -> None:
        name = Path(key).stem
        with lock:
            running[name] = running.get(name, 0) + 1
            most[name] = max(most.get(name, 0), running[name])
            polls.setdefault(name, []).append(time.monotonic())
        try:
            if name == "slow":
                time.sleep(0.45)
            real(key, watcher)  # type: ignore[arg-type]
        finally:
            with lock:
                running[name] -= 1

    sched._poll_one = counted  # type: ignore[method-assign]
    daemon.start()
    try:
        assert wait_until(lambda: len(polls.get("slow", [])) >= 4, 10)
    finally:
        daemon.stop()
    assert most == {"slow": 1, "fast": 1}
    assert daemon.metrics.polls.labels(outcome="overrun")._value.get() >= 3  # slow's
    lags = daemon.metrics.registry.get_sample_value("gatekeeper_poll_lag_seconds_count")
    assert lags is not None and lags >= len(polls["slow"]) + len(polls["fast"])  # each timed
    slow, fast = polls["slow"], polls["fast"]
    gaps = [b - a for a, b in zip(slow[:-1], slow[1:], strict=True)]
    assert min(gaps) >= 0.44  # the next poll only after the last returned
    fast_in = [t for t in fast if slow[0] <= t <= slow[-1]]
    assert len(fast_in) >= 0.5 * (slow[-1] - slow[0]) / 0.1  # ~every 0.1 s meanwhile
