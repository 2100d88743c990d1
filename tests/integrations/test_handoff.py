"""The hand-over from the training thread to the judging worker (`Gate.submit`, `wait`,
`feed`; `gatekeeper.inprocess.handoff`): stop semantics, a bounded queue that blocks,
worker errors raised on the training thread, finalize draining the queue."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.errors import GatekeeperError, UsageError
from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess import Gate, GateFailed
from gatekeeper.inprocess.handoff import Handoff
from tests.helpers import write_policy


def loss_policy(tmp: Path) -> Path:
    return write_policy(tmp / "p.yaml", """
        version: 1
        name: t
        rules:
          - id: loss-finite
            metric: loss
            check: {finite: true}
          - id: loss-small
            metric: loss
            check: {max: 10}
        """)


def run_loop(gate: Gate, nan_at: int, steps: int = 40) -> int:
    """A training loop; the last step it ran."""
    for step in range(1, steps + 1):
        if gate.feed(step, {"loss": math.nan if step == nan_at else 1.0}):
            return step
    return steps


@pytest.mark.parametrize(("mode", "last"), [("async", 8), ("sync", 7)])
def test_feed_stops_one_step_late_in_async_and_at_the_step_in_sync(
    tmp_path: Path, mode: str, last: int
) -> None:
    for _ in range(5):  # never depends on how fast the worker was
        gate = Gate(loss_policy(tmp_path), mode=mode, echo=False,
                    reports=ReportOptions(json_path=str(tmp_path / "g.json")))
        assert run_loop(gate, nan_at=7) == last
        gate.finalize()
        report = json.loads((tmp_path / "g.json").read_text())
        assert report["stopped"]["step"] == 7 and report["stopped"]["value"] == "NaN"


def test_a_full_queue_blocks_the_producer_and_drops_nothing() -> None:
    release = threading.Event()
    seen: list[int | None] = []

    def judge(step: int | None, values: dict[str, Any]) -> bool:
        release.wait(timeout=30)
        seen.append(step)
        return False

    handoff = Handoff(judge, depth=2)
    for step in (1, 2, 3):  # 1 is being judged, 2 and 3 fill the queue
        handoff.submit(step, {"x": 1.0})
    blocked = threading.Thread(target=handoff.submit, args=(4, {"x": 1.0}))
    blocked.start()
    blocked.join(timeout=0.5)
    assert blocked.is_alive()  # the producer waits for room
    release.set()
    blocked.join(timeout=30)
    handoff.drain()
    assert seen == [1, 2, 3, 4]


def test_a_worker_bug_is_raised_on_the_training_thread_with_its_type() -> None:
    def judge(step: int | None, values: dict[str, Any]) -> bool:
        if step == 3:
            raise RuntimeError("bug in the judge")
        return False

    handoff = Handoff(judge)
    tickets = [handoff.submit(step, {"x": 1.0}) for step in (1, 2, 3)]
    with pytest.raises(RuntimeError, match="bug in the judge"):  # not a GatekeeperError: 70
        handoff.wait(tickets[-1])
    assert handoff.wait(tickets[-1]) is True  # raised once; the failing hand-over stops


def test_a_bad_value_is_a_usage_error_at_the_next_call(tmp_path: Path) -> None:
    gate = Gate(loss_policy(tmp_path), echo=False)
    gate.submit(5, {"loss": 1.0})
    gate.submit(4, {"loss": 1.0})  # a step that goes back: rejected by the worker
    with pytest.raises(UsageError, match="loss") as info:
        gate.wait(2)
    assert isinstance(info.value, GatekeeperError)  # exit 2, as the CLI maps it


def test_finalize_judges_everything_handed_over(tmp_path: Path) -> None:
    gate = Gate(loss_policy(tmp_path), echo=False)
    for step in range(1, 51):
        gate.submit(step, {"loss": 20.0 if step == 50 else 1.0})
    verdict = gate.finalize(write=False)
    by_rule = {r.rule: r for r in verdict.results}
    assert by_rule["loss-finite"].judged == 50
    assert by_rule["loss-small"].status.value == "fail" and by_rule["loss-small"].step == 50


def test_host_tensors_are_copied_at_hand_over(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    gate = Gate(loss_policy(tmp_path), echo=False)
    running = torch.tensor(1.0)
    gate.submit(1, {"loss": running})
    running.fill_(float("nan"))  # a trainer's accumulator, updated in place afterwards
    verdict = gate.finalize(write=False)
    assert verdict.passed, [r.message for r in verdict.results]


def test_raise_mode_raises_at_the_next_boundary_after_the_reports(tmp_path: Path) -> None:
    gate = Gate(loss_policy(tmp_path), on_fail="raise", echo=False,
                reports=ReportOptions(json_path=str(tmp_path / "g.json")))
    with pytest.raises(GateFailed) as info:
        run_loop(gate, nan_at=3)
    assert info.value.verdict.failing()[0].step == 3
    gate.finalize()
    assert json.loads((tmp_path / "g.json").read_text())["stopped"]["step"] == 3


def test_a_held_hand_over_reaches_the_worker_only_when_released() -> None:
    seen: list[int | None] = []
    judged = threading.Event()

    def judge(step: int | None, values: dict[str, Any]) -> bool:
        seen.append(step)
        judged.set()
        return False

    handoff = Handoff(judge)
    first = handoff.submit(1, {"x": 1.0}, hold=True)
    second = handoff.submit(2, {"x": 1.0}, hold=True)
    assert not judged.wait(timeout=0.3) and seen == []  # captured, not judged
    handoff.release()
    assert handoff.wait(second) is False and seen == [1, 2]  # in order
    third = handoff.submit(3, {"x": 1.0}, hold=True)
    assert first < second < third
    assert handoff.wait(third) is False and seen == [1, 2, 3]  # a wait releases first


def test_a_held_host_tensor_keeps_its_value_at_hand_over(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    gate = Gate(loss_policy(tmp_path), echo=False)
    running = torch.tensor(1.0)
    gate.submit(1, {"loss": running}, hold=True)
    running.fill_(float("nan"))  # updated in place before the worker gets it
    gate.release()
    verdict = gate.finalize(write=False)
    assert verdict.passed, [r.message for r in verdict.results]


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("torch")
    or not __import__("torch").cuda.is_available(),
    reason="needs a CUDA device (runs on the lent GPU with the bench, not in CI)",
)
def test_device_tensors_land_with_their_values_and_one_event_per_device() -> None:
    """The device path of `capture` (torch 2.11 on an H100): tensors of several dtypes
    and shapes, one needing grad, are stacked per group and copied without a sync; once
    the event says so, `landed` gives every value exactly, in the order handed over."""
    import torch

    from gatekeeper.inprocess.handoff import capture, landed

    w = torch.ones((), device="cuda", requires_grad=True)
    metrics = {
        "loss": (w * 2.5).squeeze(), "lr": 1e-4, "grad": torch.tensor(0.5, device="cuda"),
        "bf": torch.tensor(1.5, device="cuda", dtype=torch.bfloat16),
        "one": torch.tensor([7.0], device="cuda"), "nan": torch.tensor(float("nan"),
                                                                       device="cuda"),
        "host": torch.tensor(3.0),
    }
    values, event = capture(metrics)
    assert event is not None and type(event).__name__ != "_Events"  # one device: one event
    event.synchronize()
    assert event.query()
    got = landed(values)
    assert list(got) == list(metrics)
    assert got["loss"] == 2.5 and got["lr"] == 1e-4 and got["grad"] == 0.5
    assert float(got["bf"]) == 1.5 and float(got["host"]) == 3.0
    assert got["one"].tolist() == [7.0]  # a (1,)-shaped tensor stays one, on the host
    assert not got["one"].is_cuda
    assert math.isnan(got["nan"])
