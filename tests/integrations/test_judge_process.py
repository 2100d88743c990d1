"""The judge process of an asynchronous `Gate` (`gatekeeper.inprocess.judge`): judging
runs off the trainer's process, so it never holds the training thread's GIL; it lives as
long as the gate, ends with the trainer (even one killed with -9), survives a Ctrl-C of
the trainer so the final report is still written, and a judge that dies is an error on
the training thread, never a silent pass. Real child processes throughout."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess import Gate
from gatekeeper.inprocess.wire import JudgeProcessError
from tests.helpers import REPO, write_policy
from tests.integrations.test_handoff import loss_policy, run_loop


def judges_of(pid: int) -> list[int]:
    """Child processes of `pid` running the judge module."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and any(b"gatekeeper.inprocess.judge" in part for part in cmd):
            found.append(int(entry.name))
    return found


def gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":  # ended, not yet reaped by its (killed) parent
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("judge", ["process", "thread"])
def test_both_judges_stop_one_step_late_with_the_same_report(tmp_path: Path, judge: str) -> None:
    out = tmp_path / f"{judge}.json"
    before = set(judges_of(os.getpid()))  # other tests' gates in this worker may live on
    gate = Gate(loss_policy(tmp_path), echo=False, judge=judge,
                reports=ReportOptions(json_path=str(out)))
    mine = set(judges_of(os.getpid())) - before
    assert len(mine) == (1 if judge == "process" else 0)
    assert run_loop(gate, nan_at=7) == 8
    gate.finalize()
    report = json.loads(out.read_text())
    assert report["stopped"]["step"] == 7 and report["stopped"]["value"] == "NaN"
    assert report["stopped"]["pid"] == os.getpid()  # the trainer's, not the judge's
    assert all(gone(pid, 10) for pid in mine)  # finalize ended the judge


def test_values_reach_the_judge_as_observe_reads_them(tmp_path: Path) -> None:
    """Non-finite floats, nulls, marker strings, tensors, numpy scalars and integers
    wider than 64 bits survive the pipe exactly (orjson writes the rows: NaN and the
    infinities go as marker strings): the judge process gives the verdict the in-process
    judge gives, with each metric's last value."""
    torch = pytest.importorskip("torch")
    verdicts = {}
    values = [1.0, torch.tensor(2.0), None, "Infinity", -math.inf]
    more = [math.inf, np.float64(3.5), math.nan, 2**70, np.float32(-math.inf)]
    policy = write_policy(tmp_path / "m.yaml", "version: 1\nname: m\nrules:\n" + "".join(
        f"  - {{id: m{s}, metric: m{s}, check: {{max: 1.0e+30}}}}\n" for s in range(6, 11)))
    for judge in ("process", "thread"):
        gate = Gate([loss_policy(tmp_path), policy], echo=False, judge=judge)
        for step, value in enumerate(values, 1):
            gate.submit(step, {"loss": value})
        for step, value in enumerate(more, len(values) + 1):
            gate.submit(step, {"loss": 1.0, f"m{step}": value})
        verdicts[judge] = gate.finalize(write=False)
    finite = next(r for r in verdicts["process"].results if r.rule == "loss-finite")
    assert finite.status.value == "error" and finite.step == 3
    seen = {r.rule: (r.status.value, r.value) for r in verdicts["process"].results}
    assert seen["m7"] == ("pass", 3.5) and seen["m9"] == ("pass", float(2**70))
    assert [seen[f"m{s}"][0] for s in (6, 8, 10)] == ["error"] * 3
    assert [r.to_dict() for r in verdicts["process"].results] == [
        r.to_dict() for r in verdicts["thread"].results]


def test_every_observation_of_the_process_equals_the_thread_judges(tmp_path: Path) -> None:
    """Step by step, quiet steps (an answer the process reuses) between a rule coming in,
    a failure and a recovery of the loss: the same status, changes, failing and points."""
    seen: dict[str, list[tuple[object, ...]]] = {}
    values = [1.0, 1.0, 1.0, 1.0, 1.0, 20.0, 20.0, 1.0, math.nan, 1.0]
    for judge in ("process", "thread"):
        gate = Gate(loss_policy(tmp_path), echo=False, judge=judge, on_fail="report")
        seen[judge] = []
        for step, value in enumerate(values, 1):
            obs = gate.observe(step, {"loss": value} if step != 4 else {"loss": 1.0, "x": 2})
            seen[judge].append((
                obs.status, obs.points, [(c.before, c.result.to_dict()) for c in obs.changes],
                [r.to_dict() for r in obs.failing]))
        gate.finalize(write=False)
    assert seen["process"] == seen["thread"]
    assert [s[0].value for s in seen["process"]][:7] == ["pass"] * 5 + ["fail"] * 2
    assert [s[1] for s in seen["process"]][:5] == [1, 1, 1, 2, 1]


def test_a_judge_that_dies_is_an_error_on_the_training_thread(tmp_path: Path) -> None:
    before = set(judges_of(os.getpid()))
    gate = Gate(loss_policy(tmp_path), echo=False)
    assert gate.feed(1, {"loss": 1.0}) is False
    (judge,) = set(judges_of(os.getpid())) - before
    os.kill(judge, signal.SIGKILL)
    ended = r"judge process \(pid \d+\) ended \(exit code -9\)"
    with pytest.raises(JudgeProcessError, match=ended):
        for step in range(2, 10):
            gate.feed(step, {"loss": 1.0})
    assert issubclass(JudgeProcessError, RuntimeError)  # a bug: the CLI maps it to 70


def test_a_gate_dropped_without_finalize_ends_its_judge(tmp_path: Path) -> None:
    """No reference cycle keeps a forgotten gate (and its ~60 MB judge) alive: dropping
    the last reference ends its worker and its judge process."""
    before = set(judges_of(os.getpid()))
    gate = Gate(loss_policy(tmp_path), echo=False)
    for step in (1, 2, 3):
        gate.feed(step, {"loss": 1.0})
    (judge,) = set(judges_of(os.getpid())) - before
    del gate  # no gc.collect(): reference counting alone must free it
    assert gone(judge, 15), "a dropped gate's judge process lives on"


TRAINER = """
import sys, time
sys.path.insert(0, {repo!r})
from gatekeeper.gate import ReportOptions
from gatekeeper.inprocess import Gate
with Gate({policy!r}, echo=False, reports=ReportOptions(json_path={report!r})) as gate:
    for step in range(1, 100000):
        if gate.feed(step, {{"loss": 1.0}}):
            break
        if step == 3:
            print("ready", flush=True)
        time.sleep(0.01)
"""


def start_trainer(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    report = tmp_path / "trainer.json"
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.format(repo=str(REPO), policy=str(loss_policy(tmp_path)),
                                     report=str(report)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc, report


def test_the_judge_ends_with_a_trainer_killed_with_9(tmp_path: Path) -> None:
    proc, _ = start_trainer(tmp_path)
    try:
        (judge,) = judges_of(proc.pid)
        proc.kill()
        proc.wait(timeout=30)
        assert gone(judge, 10), "the judge outlived its trainer"
    finally:
        proc.kill()


def test_ctrl_c_of_the_trainer_still_writes_the_final_report(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal sends it: the judge ignores it,
    the trainer's `with Gate(...)` ends the run as crashed and writes the report."""
    proc, report = start_trainer(tmp_path)
    try:
        (judge,) = judges_of(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        data = json.loads(report.read_text())
        assert data["run"]["state"] == "crashed", data["run"]
        assert next(r for r in data["results"] if r["rule"] == "loss-finite")["judged"] >= 3
        assert gone(judge, 10)
    finally:
        proc.kill()
