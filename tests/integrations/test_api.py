"""The in-process API: `Gate.observe` / `verdict` / `finalize`, the actions on failure,
per-metric step axes, thread safety, `GateLogger`, and `import gatekeeper` staying light."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gatekeeper
from gatekeeper import Gate, GateFailed, GateLogger
from gatekeeper.errors import PolicyError, UsageError
from gatekeeper.gate import ReportOptions
from gatekeeper.verdict import GateStatus, Status
from tests.helpers import gatekeeper as cli
from tests.helpers import write_policy, write_rows

POLICY = """
version: 1
name: rl
rules:
  - id: kl-step0
    metric: train/ppo_kl
    steps: [0]
    check: {abs_max: 1.0e-9}
  - id: loss-finite
    metric: train/loss
    check: {finite: true}
  - id: reward-reaches
    metric: rollout/raw_reward
    check: {reach: {value: 0.7, by_step: 5}}
"""


@pytest.fixture
def pol(tmp_path: Path) -> Path:
    return write_policy(tmp_path / "rl.yaml", POLICY)


def quiet(**kw: object) -> dict[str, object]:
    return {"echo": None, "reports": ReportOptions(quiet=True), **kw}


def test_a_nan_is_an_error_at_the_step_it_is_observed(pol: Path) -> None:
    gate = Gate(pol, **quiet())
    assert gate.observe(0, {"train/ppo_kl": 0.0, "train/loss": 1.0}).status is GateStatus.PENDING
    assert not gate.should_stop
    obs = gate.observe(1, {"train/loss": math.nan})
    assert obs.stop and obs.status is GateStatus.ERROR
    assert [(r.rule, r.step) for r in obs.failing] == [("loss-finite", 1)]
    assert gate.should_stop


def test_a_null_is_never_skipped(pol: Path) -> None:
    gate = Gate(pol, **quiet())
    assert gate.observe(0, {"train/loss": None}).failing[0].message.startswith("non-finite")


def test_raise_and_report_modes(pol: Path) -> None:
    raising = Gate(pol, on_fail="raise", **quiet())
    with pytest.raises(GateFailed, match="rl/kl-step0") as info:
        raising.observe(0, {"train/ppo_kl": -0.3})
    assert info.value.exit_code == 1 and info.value.verdict.status is GateStatus.FAIL
    reporting = Gate(pol, on_fail="report", **quiet())
    obs = reporting.observe(0, {"train/ppo_kl": -0.3})
    assert obs.failing and not obs.stop and not reporting.should_stop and reporting.failed
    assert reporting.finalize().stopped is None  # reported, not stopped


def test_finalize_turns_pending_into_error_like_check(pol: Path, tmp_path: Path) -> None:
    rows = [{"train/step": s, "train/loss": 1.0 / (s + 1), "rollout/step": s,
             "rollout/raw_reward": 0.1 * s} for s in range(4)]
    gate = Gate(pol, reports=ReportOptions(json_path=str(tmp_path / "gate.json"), quiet=True),
                echo=None)
    obs = gate.observe_rows(rows)  # one batch; each metric on its own axis, as in JSONL
    assert obs.points == 8 and obs.status is GateStatus.PENDING
    final = gate.finalize()  # the run ended at step 3, before reach's by_step 5: a SKIP, as check
    assert {r.rule: r.status for r in final.results} == {
        "kl-step0": Status.ERROR, "loss-finite": Status.PASS, "reward-reaches": Status.SKIP}
    assert gate.finalize() is final and gate.verdict() is final
    with pytest.raises(UsageError, match="finalized"):
        gate.observe(5, {"train/loss": 1.0})
    record = write_rows(tmp_path / "run.jsonl", rows)
    proc = cli("check", str(record), "-p", str(pol), "--json", str(tmp_path / "c.json"), "-q")
    assert proc.returncode == 1, proc.stderr
    ours = json.loads((tmp_path / "gate.json").read_text())["results"]
    assert ours == json.loads((tmp_path / "c.json").read_text())["results"]


def test_steps_of_a_metric_must_not_go_back(pol: Path) -> None:
    gate = Gate(pol, **quiet())
    gate.observe(3, {"train/loss": 1.0})
    gate.observe(3, {"train/loss": 1.0})  # the same step again is allowed, as in JSONL
    with pytest.raises(UsageError, match="step 2 arrived after step 3"):
        gate.observe(2, {"train/loss": 1.0})
    with pytest.raises(UsageError, match="expected a number"):
        gate.observe(4, {"train/loss": "high"})
    with pytest.raises(UsageError, match="no step for metric"):
        gate.observe(None, {"train/loss": 1.0})


@pytest.mark.parametrize("judge", ["thread", "process"])
def test_a_config_that_changes_a_period_after_points_were_judged_is_an_error(
    tmp_path: Path, judge: str
) -> None:
    """`steps: {every: config.k, default: 2}`: steps 0..9 judged by the default, then
    `update_run(config={"k": 3})`. An in-process gate keeps no points to select again:
    the rule is an error saying why (it went on judging by the old period, silently
    unlike `check`), in the judge process too; finalize keeps it."""
    text = ("version: 1\nname: p\nrules:\n  - {id: r, metric: m, check: {max: 5}, "
            "steps: {every: config.k, default: 2}}\n")
    gate = Gate(write_policy(tmp_path / "p.yaml", text), **quiet(on_fail="report", judge=judge))
    for step in range(10):
        gate.observe(step, {"m": 1.0})
    assert gate.verdict().results[0].status is Status.PASS
    gate.update_run(config={"k": 3})
    gate.observe(10, {"m": 1.0})
    (r,) = gate.finalize(write=False).results[:1]
    assert r.status is Status.ERROR
    assert r.message.startswith("the run's config changed the period of steps every from 2 to 3")
    assert "judge the run again from its start" in r.message


@pytest.mark.parametrize(("step", "metrics", "words"), [
    (2**70, {"train/loss": 1.0}, "must fit int64"),
    (1, {"train/loss": 10**400}, "out of the range of a float64"),
    (1, {7: 1.0}, "metric names are strings"),
])
@pytest.mark.parametrize("judge", ["thread", "process"])
def test_a_row_the_jsonl_reader_refuses_is_refused_and_the_gate_goes_on(
    pol: Path, step: int, metrics: dict, words: str, judge: str
) -> None:
    """As the JSONL reader refuses a step past int64 or a number past float64: a
    UsageError, nothing of the row kept, whichever judge. A step 2**70 was an
    OverflowError after the row was kept (every later step "went back"); a key that is no
    string an AttributeError in a thread and a metric "7" in the judge process."""
    gate = Gate(pol, **quiet(judge=judge))
    with pytest.raises(UsageError, match=words):
        gate.observe(step, metrics)
    assert gate.observe(2, {"train/loss": 1.0}).points == 1
    gate.observe(2**53 + 1, {"train/loss": 1.0})  # exact: not rounded through a float
    assert gate.verdict().results[1].step == 2**53 + 1


def test_policy_errors_surface_before_training(tmp_path: Path) -> None:
    bad = write_policy(tmp_path / "bad.yaml", POLICY.replace("1.0e-9", "-1"))
    with pytest.raises(PolicyError, match="bad.yaml"):
        Gate(bad, **quiet())


def test_a_logger_thread_and_the_training_thread(pol: Path) -> None:
    gate = Gate(pol, **quiet())
    errors: list[BaseException] = []

    def log(metric: str, axis: str) -> None:
        try:
            for s in range(300):
                gate.observe(None, {axis: s, metric: 1.0})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=log, args=("train/loss", "train/step")),
               threading.Thread(target=log, args=("rollout/raw_reward", "rollout/step"))]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        assert not gate.should_stop
    for t in threads:
        t.join()
    assert not errors
    final = gate.finalize(write=False)
    by_rule = {r.rule: r for r in final.results}
    assert by_rule["loss-finite"].judged == 300
    assert by_rule["reward-reaches"].status is Status.PASS


def test_gate_logger_forwards_first_then_judges(pol: Path) -> None:
    seen: list[dict[str, object]] = []
    log = GateLogger(Gate(pol, axis="train/step", **quiet()),
                     forward=lambda m, **kw: seen.append(dict(m, **kw)))
    log({"train/ppo_kl": 0.0, "train/loss": 2.0, "hist": [1, 2]}, step=0)
    assert not log.should_stop
    assert log({"train/loss": math.inf}, step=1).stop and log.should_stop
    assert seen[-1] == {"train/loss": math.inf, "step": 1}  # the bad point reached the logger


def test_import_gatekeeper_stays_light() -> None:
    code = (
        "import sys, gatekeeper; heavy = {'torch', 'transformers', 'lightning', 'wandb', "
        "'httpx', 'apscheduler', 'prometheus_client', 'numpy', 'pydantic'}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    assert gatekeeper.Gate is Gate


def test_integrations_name_their_extra_when_missing(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['lightning'] = None; "
        "sys.modules['pytorch_lightning'] = None\n"
        "for mod in ('gatekeeper.integrations.hf', 'gatekeeper.integrations.lightning'):\n"
        "    try:\n        __import__(mod)\n    except ImportError as e:\n        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert "pip install 'gatekeeper[hf]'" in out.stdout
    assert "pip install 'gatekeeper[lightning]'" in out.stdout


def test_context_manager_finalizes_and_records_a_crash(pol: Path) -> None:
    with pytest.raises(RuntimeError):
        with Gate(pol, **quiet()) as gate:
            gate.observe(0, {"train/ppo_kl": 0.0})
            raise RuntimeError("trainer crashed")
    final = gate.verdict()
    assert final.final and final.run["state"] == "crashed"
    assert {r.rule: r.status for r in final.results}["kl-step0"] is Status.PASS
