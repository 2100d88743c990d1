"""An asynchronous gate with a judge process is fed through its pipe by the training
thread itself (`gatekeeper.inprocess.handoff`, `Pipe`; `remote.RemoteJudge.send_rows` /
`take`): no worker thread, answers read a step later and in order, a device copy sent
once it has landed, answers owed kept across any other call, and no deadlock when
requests and answers are both larger than a pipe holds."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess import Gate, handoff
from gatekeeper.inprocess.handoff import Handoff
from tests.helpers import wait_until, write_policy
from tests.integrations.test_handoff import loss_policy, run_loop


def gate_threads(before: set[threading.Thread] | None = None) -> list[str]:
    """The names of the gate threads alive now and not in `before`."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith("gatekeeper-") and t not in (before or set())]


def test_a_judge_process_is_fed_from_the_training_thread_with_no_worker(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    gate = Gate(loss_policy(tmp_path), echo=False,
                reports=ReportOptions(json_path=str(tmp_path / "g.json")))
    assert run_loop(gate, nan_at=7) == 8  # the stop one step after the violation
    assert gate_threads(before) == []
    gate.finalize()
    assert json.loads((tmp_path / "g.json").read_text())["stopped"]["step"] == 7
    threaded = Gate(loss_policy(tmp_path), echo=False, judge="thread")
    assert run_loop(threaded, nan_at=7) == 8
    assert gate_threads(before) == ["gatekeeper-judge"]  # a judge in this process: a worker
    threaded.finalize(write=False)


class FakeEvent:
    """A device copy's event: it lands when the test says so."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def query(self) -> bool:
        return self.done.is_set()

    def synchronize(self) -> None:
        assert self.done.wait(timeout=30)


class Recorder:
    """A `Pipe` answering in order: stop at the step given; which thread sent each."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.sent: list[int | None] = []
        self.senders: list[str] = []
        self.taken = 0
        self.stop_at = stop_at

    def send(self, step: int | None, metrics: dict[str, Any]) -> None:
        self.sent.append(step)
        self.senders.append(threading.current_thread().name)

    def take(self) -> bool:
        step = self.sent[self.taken]
        self.taken += 1
        return step == self.stop_at


def test_device_copies_are_sent_once_landed_host_values_at_once_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[FakeEvent] = []

    def capture(metrics: Any) -> tuple[dict[str, Any], Any]:
        event = FakeEvent() if "device" in metrics else None
        if event is not None:
            events.append(event)
        return dict(metrics), event

    monkeypatch.setattr(handoff, "capture", capture)
    pipe = Recorder(stop_at=3)
    before = set(threading.enumerate())
    h = Handoff(lambda step, values: False, pipe=pipe)
    first = h.submit(1, {"device": 1.0})
    h.submit(2, {"host": 1.0})
    time.sleep(0.2)
    assert pipe.sent == []  # 1's copy has not landed; 2 is behind it; the caller goes on
    events[0].done.set()
    assert wait_until(lambda: pipe.sent == [1, 2], timeout=10)
    assert pipe.senders == ["gatekeeper-sender"] * 2 and pipe.taken == 0
    assert h.wait(first) is False and pipe.taken == 1  # answers read when awaited
    h.submit(3, {"host": 1.0})  # nothing ahead of it: sent from the caller's thread
    assert pipe.sent == [1, 2, 3] and pipe.senders[-1] == threading.current_thread().name
    fourth = h.submit(4, {"device": 1.0}, hold=True)
    events[1].done.set()
    h.release()  # landed by the time it is released: sent from here, never awaited
    assert pipe.sent == [1, 2, 3, 4] and pipe.senders[-1] == threading.current_thread().name
    assert h.wait(fourth) is True  # 3 said stop
    assert pipe.taken == 4
    h.drain()
    assert gate_threads(before) == []  # the sender ended with the drain


def test_sends_without_waits_owe_at_most_two_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = Recorder()
    h = Handoff(lambda step, values: False, pipe=pipe)
    for step in range(1, 101):
        h.submit(step, {"x": 1.0})
        assert len(pipe.sent) - pipe.taken <= handoff.OUTSTANDING
    h.drain()
    assert pipe.sent == list(range(1, 101)) and pipe.taken == 100


def test_answers_owed_are_kept_across_other_calls_in_order(tmp_path: Path) -> None:
    gate = Gate(loss_policy(tmp_path), echo=False, on_fail="report")
    tickets = [gate.submit(step, {"loss": 20.0 if step == 2 else 1.0}) for step in (1, 2, 3)]
    live = gate.verdict()  # a call of its own while the answers of 2 and 3 are owed
    assert {r.rule: r.judged for r in live.results}["loss-finite"] == 3
    obs = gate.observe(4, {"loss": 1.0})
    assert obs.status.value == "fail" and obs.failing[0].step == 2
    assert gate.wait(tickets[-1]) is False  # on_fail="report": judged, never a stop
    assert gate.failed
    verdict = gate.finalize(write=False)
    assert {r.rule: r.judged for r in verdict.results}["loss-finite"] == 4


def test_large_requests_and_answers_never_fill_both_pipes(tmp_path: Path) -> None:
    """Rows of 6,000 metrics (~130 KB a request) judged by a pattern rule (an answer
    of ~2 MB of changes at the first step): sent ahead of their answers they would fill
    both pipes; each waits for the answers owed instead."""
    policy = write_policy(tmp_path / "wide.yaml", """
        version: 1
        name: wide
        rules:
          - id: finite
            metric: "layer/*/norm"
            check: {finite: true}
        """)
    gate = Gate(policy, echo=False, on_fail="report")
    row = {f"layer/{i:05d}/norm": 1.0 for i in range(6000)}
    done: list[bool] = []

    def feed() -> None:
        for step in range(1, 5):
            gate.submit(step, row)
        gate.wait(4)
        done.append(True)

    worker = threading.Thread(target=feed, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert done == [True], "the gate and its judge process deadlocked on their pipes"
    verdict = gate.finalize(write=False)
    assert len(verdict.results) == 6000 and all(r.judged == 4 for r in verdict.results)


def test_a_failed_gate_reporting_on_is_told_its_failing_rules_only_when_it_asks(
    tmp_path: Path,
) -> None:
    """Under on_fail="report" a failed gate goes on; its hand-overs do not ask for the
    failing rules again (their messages count the violating points, so they change every
    step), a call of its own gets them fresh: the same as the thread judge's."""
    seen = {}
    for judge in ("process", "thread"):
        gate = Gate(loss_policy(tmp_path), echo=False, judge=judge, on_fail="report")
        for step in range(1, 31):
            assert gate.feed(step, {"loss": 20.0 if step >= 3 else 1.0}) is False
        obs = gate.observe(31, {"loss": 20.0})
        seen[judge] = [r.to_dict() for r in obs.failing]
        assert gate.failed and gate.verdict().failing()[0].step == 3
        gate.finalize(write=False)
    assert seen["process"] == seen["thread"]
    assert "29 of 31" in seen["process"][0]["message"]



def test_a_ctrl_c_while_awaiting_an_answer_leaves_it_owed() -> None:
    """The training thread reads the answers, so Ctrl-C may land while it waits for one:
    the KeyboardInterrupt goes up at once and the answer stays owed, read by the next
    wait for its own ticket (not taken as a failure, not shifted onto the next one)."""

    class Interrupted(Recorder):
        def __init__(self) -> None:
            super().__init__(stop_at=2)
            self.interrupt = True

        def take(self) -> bool:
            if self.interrupt:
                self.interrupt = False
                raise KeyboardInterrupt
            return super().take()

    pipe = Interrupted()
    h = Handoff(lambda step, values: False, pipe=pipe)
    first = h.submit(1, {"x": 1.0})
    with pytest.raises(KeyboardInterrupt):
        h.wait(first)
    assert h.wait(first) is False  # 1's own answer, read now
    second = h.submit(2, {"x": 1.0})
    assert h.wait(second) is True and pipe.taken == 2
