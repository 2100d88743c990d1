"""Two readings of the engine a healthy or broken run depends on, whole and poll by poll:

- `steps: last` judges a metric's staleness on its own axis: on the plain `step`
  (TensorBoard, MLflow) each metric counts its own steps, so validation per epoch next to
  training per batch is no stale point; on a named axis (miles' train/step) a metric that
  stopped before the others is still an error (issue 26, item 4);
- the first violation in step order is reported: a `for` that fired before the first
  NaN/Inf is the FAIL, naming the NaN/Inf beside it, whatever the polls (issue 26, item 7).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import RuleResult, Status
from tests.helpers import gatekeeper, write_policy

EPOCHS, BATCHES = 10, 10
# loss 1 ... 500 at step 10 (over max: 100), 1e30 at 11, Inf after
LOSS = [1.0] * 10 + [500.0, 1e30] + [math.inf] * 4


def _policies(tmp_path: Path, rules: str) -> list:
    return load_policies([str(write_policy(tmp_path / "p.yaml", f"""
        version: 1
        name: p
        rules:
        {rules}"""))])


def _every_split(series: dict[str, Series]) -> list[list[dict[str, Series]]]:
    """The run as polls, cut at every step of the longest metric (and whole)."""
    end = max(int(s.steps[-1]) for s in series.values())
    feeds = []
    for cut in range(end + 2):
        polls = []
        for lo, hi in ((None, cut), (cut, None)):
            poll = {}
            for m, s in series.items():
                keep = np.ones(len(s), bool)
                if lo is not None:
                    keep &= s.steps >= lo
                if hi is not None:
                    keep &= s.steps < hi
                poll[m] = Series(m, s.steps[keep], s.values[keep], s.step_key)
            polls.append(poll)
        feeds.append(polls)
    return feeds


def _whole_and_polls(policies: list, series: dict[str, Series]) -> list[RuleResult]:
    """The whole run's results; asserts every split into polls ends with the same results
    and no live verdict on the way fails a rule the whole run does not fail alike."""
    run = Run(name="r", source="mem", series=series)
    whole = evaluate(policies, run).results
    for polls in _every_split(series):
        ev = Evaluation(policies)
        for poll in polls:
            ev.feed(poll)
            for live, final in zip(ev.verdict(run, final=False).results, whole, strict=True):
                if live.status in (Status.FAIL, Status.ERROR):
                    assert (live.status, live.step) == (final.status, final.step), live.message
                else:
                    assert live.status in (Status.PENDING, Status.PASS), live.message
        fed = ev.verdict(run, final=True).results
        assert [(r.status, r.step, r.message) for r in fed] == [
            (r.status, r.step, r.message) for r in whole
        ]
    return whole


def _epochs_and_batches(axis: str) -> dict[str, Series]:
    steps = np.arange(EPOCHS * BATCHES, dtype=np.int64)
    epochs = np.arange(EPOCHS, dtype=np.int64)
    return {
        "train/loss": Series("train/loss", steps, 1.0 / (steps + 1.0), axis),
        "val/loss": Series("val/loss", epochs, 0.5 - epochs / 100, axis),
    }


def test_a_per_epoch_metric_on_the_plain_step_is_judged_on_its_own_points(
    tmp_path: Path,
) -> None:
    """TensorBoard/MLflow: val/loss at step = epoch 0..9, train/loss at batches 0..99."""
    policies = _policies(tmp_path, """
          - {id: val, metric: val/loss, steps: last, check: {max: 0.45}}
          - {id: val-tail, metric: val/loss, steps: {last: 3}, check: {max: 0.45}}
          - {id: val-bad, metric: val/loss, steps: last, check: {max: 0.4}}
          - {id: train, metric: train/loss, steps: last, check: {max: 0.1}}
    """)
    val, tail, bad, train = _whole_and_polls(policies, _epochs_and_batches("step"))
    assert val.status is Status.PASS and val.step == 9, val.message
    assert "val/loss's last point is at step 9, other metrics reach step 99" in val.message
    assert tail.status is Status.PASS, tail.message
    assert bad.status is Status.FAIL and bad.step == 9, bad.message  # still judged
    assert train.status is Status.PASS and train.step == 99, train.message


def test_a_metric_that_stopped_on_a_named_axis_is_still_an_error(tmp_path: Path) -> None:
    """miles' axes are shared: train/* on train/step; a metric ending 90 steps before the
    others on its axis (its own gap 1) would be judged on a stale point."""
    policies = _policies(tmp_path, """
          - {id: val, metric: val/loss, steps: last, check: {max: 0.45}}
    """)
    (val,) = _whole_and_polls(policies, _epochs_and_batches("train/step"))
    assert val.status is Status.ERROR and val.step == 9, val.message
    assert "points end at train/step 9, but the run reaches train/step 99" in val.message


def _loss(axis: str = "train/step") -> dict[str, Series]:
    steps = np.arange(len(LOSS), dtype=np.int64)
    return {"loss": Series("loss", steps, np.array(LOSS), axis)}


@pytest.mark.parametrize(("for_", "status", "step"), [
    (1, Status.FAIL, 10),  # 500 at step 10 violates before the Inf at 12
    (2, Status.FAIL, 11),  # 500, 1e30: two in a row at step 11
    (3, Status.ERROR, 12),  # the Inf at 12 comes before a third violation could
])
def test_the_first_violation_in_step_order_is_reported(
    tmp_path: Path, for_: int, status: Status, step: int
) -> None:
    policies = _policies(tmp_path, f"""
          - {{id: loss, metric: loss, check: {{max: 100}}, for: {for_}}}
    """)
    (loss,) = _whole_and_polls(policies, _loss())
    assert (loss.status, loss.step) == (status, step), loss.message
    if status is Status.FAIL:
        assert f"at train/step {step}" in loss.message
        assert "(and non-finite value Infinity at train/step 12; later points not judged)" in (
            loss.message
        )
    else:
        assert loss.message == "non-finite value Infinity at train/step 12"


def test_a_reduction_over_a_nan_is_still_its_error(tmp_path: Path) -> None:
    """A reduction is one value of the whole selection: a NaN/Inf in it is the error."""
    policies = _policies(tmp_path, """
          - {id: loss, metric: loss, reduce: max, check: {max: 100}}
    """)
    (loss,) = _whole_and_polls(policies, _loss())
    assert (loss.status, loss.step) == (Status.ERROR, 12), loss.message


# ---- through the CLI, with files written by the real libraries --------------------------


def _check(tmp_path: Path, source: str, rules: str) -> tuple[int, dict[str, dict]]:
    pol = tmp_path / "gate.yaml"
    pol.write_text(f"version: 1\nname: gate\nrules:{rules}")
    out = tmp_path / "v.json"
    proc = gatekeeper("check", source, "-p", str(pol), "--json", str(out), "-q")
    assert out.exists(), proc.stdout + proc.stderr
    return proc.returncode, {r["rule"]: r for r in json.loads(out.read_text())["results"]}


EPOCH_RULES = """
  - {id: val, metric: val/loss, steps: last, check: {max: 0.45}}
  - {id: train, metric: train/loss, steps: last, check: {max: 0.1}}
"""


def test_torch_summary_writer_val_per_epoch_next_to_train_per_batch_passes(
    tmp_path: Path,
) -> None:
    """torch 2.x `torch.utils.tensorboard.SummaryWriter`, as a training loop logs it:
    `add_scalar("train/loss", x, global_step)` every batch, `add_scalar("val/loss", x,
    epoch)` every epoch. Before: ERROR "points end at step 9, but the run reaches step 99"."""
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(tmp_path / "runs"))
    for epoch in range(EPOCHS):
        for batch in range(BATCHES):
            step = epoch * BATCHES + batch
            writer.add_scalar("train/loss", 1.0 / (step + 1), step)
        writer.add_scalar("val/loss", 0.5 - epoch / 100, epoch)
    writer.close()
    code, results = _check(tmp_path, str(tmp_path / "runs"), EPOCH_RULES)
    assert code == 0, results
    assert results["val"]["status"] == "pass" and results["val"]["step"] == 9
    assert results["train"]["status"] == "pass" and results["train"]["step"] == 99


def test_mlflow_val_per_epoch_next_to_train_per_batch_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.x client into a file store, steps as `mlflow.pytorch.autolog` logs them:
    per-batch metrics at the global step, per-epoch ones at step = epoch."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 file stores: opt-in
    store = f"file://{tmp_path / 'mlruns'}"
    client = MlflowClient(store)
    run_id = client.create_run(client.create_experiment("epochs")).info.run_id
    for epoch in range(EPOCHS):
        for batch in range(BATCHES):
            step = epoch * BATCHES + batch
            client.log_metric(run_id, "train/loss", 1.0 / (step + 1), step=step)
        client.log_metric(run_id, "val/loss", 0.5 - epoch / 100, step=epoch)
    client.set_terminated(run_id, "FINISHED")
    code, results = _check(tmp_path, f"mlflow+{store}/runs/{run_id}", EPOCH_RULES)
    assert code == 0, results
    assert results["val"]["status"] == "pass" and results["val"]["step"] == 9


def test_torch_summary_writer_fail_before_an_inf_is_reported_at_its_step(
    tmp_path: Path,
) -> None:
    """The issue's run: loss 1 ... 500 at step 10, 1e30 at 11, Inf after. Before: ERROR at
    the Inf, never the FAIL at step 10."""
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(tmp_path / "runs"))
    for step, loss in enumerate(LOSS):
        writer.add_scalar("train/loss", loss, step)
    writer.close()
    code, results = _check(tmp_path, str(tmp_path / "runs"), """
  - {id: loss, metric: train/loss, check: {max: 100}}
""")
    assert code == 1, results
    loss = results["loss"]
    assert (loss["status"], loss["step"], loss["value"]) == ("fail", 10, 500.0), loss
    assert "non-finite value Infinity at step 12" in loss["message"]


@pytest.mark.parametrize("delay", ["0", "0.05"])
def test_run_stops_at_the_first_violation_wherever_the_polls_fall(
    tmp_path: Path, delay: str
) -> None:
    """`run` over a tensorboardX 2.6 writer (tests/sources/tb_writer.py): 5.0 at step 10
    (over max: 2), NaN at 12. Written at once (one poll sees both) or a point per 50 ms
    (a poll sees step 10 first), the gate stops at step 10 and the verdict says FAIL."""
    pytest.importorskip("tensorboardX")
    writer = Path(__file__).parent / "sources" / "tb_writer.py"
    pol = tmp_path / "gate.yaml"
    pol.write_text("version: 1\nname: gate\nrules:\n"
                   "  - {id: loss, metric: train/loss, check: {max: 2.0}}\n")
    out, logdir = tmp_path / "v.json", tmp_path / "logs"
    proc = gatekeeper(
        "run", "-p", str(pol), "--source", f"tensorboard://{logdir}", "--json", str(out),
        "--interval", "0.1", "--grace", "5", "--", sys.executable, str(writer), str(logdir),
        "--steps", "16", "--delay", delay, "--bad-at", "10", "--nan-at", "12",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = json.loads(out.read_text())
    (loss,) = verdict["results"]
    assert (loss["status"], loss["step"], loss["value"]) == ("fail", 10, 5.0), loss
