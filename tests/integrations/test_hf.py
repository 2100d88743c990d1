"""The Hugging Face callback on the real `transformers.Trainer` (CPU, a randomly
initialized one-layer GPT-2, a synthetic dataset, a few dozen steps).

Mirrors transformers 5.24: `TrainerCallback`/`TrainerControl.should_training_stop`,
`WandbCallback.on_log` naming (`train/loss` on `train/global_step`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gatekeeper.gate import ReportOptions  # noqa: E402
from gatekeeper.inprocess import GateFailed  # noqa: E402
from gatekeeper.integrations.hf import GatekeeperCallback, rewrite_logs  # noqa: E402
from tests.integrations.trainers import Recorder, check_results, comparable, policy  # noqa: E402

VOCAB, SEQ = 64, 16


class Tokens(torch.utils.data.Dataset):
    """Deterministic random token sequences; labels = inputs (language modelling)."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(self.seed * 10_000 + i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "labels": ids}


class Poison(transformers.TrainerCallback):
    """Turns the embedding weights NaN before step `at` runs: the loss of that step (and
    its grad norm) is NaN, as in a run that diverged."""

    def __init__(self, at: int):
        self.at = at

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step + 1 == self.at:
            with torch.no_grad():
                model.transformer.wte.weight.fill_(float("nan"))


class Record(transformers.TrainerCallback):
    """The test's own JSONL logger, with WandbCallback's names."""

    def __init__(self):
        self.recorder = Recorder("train/global_step")

    def on_log(self, args, state, control, logs=None, **kwargs):
        skip = {"train_runtime", "train_samples_per_second", "train_steps_per_second",
                "train_loss", "total_flos"}
        kept = {k: v for k, v in (logs or {}).items() if k not in skip}
        self.recorder.add(state.global_step, rewrite_logs(kept))


def train(tmp: Path, steps: int, callbacks: list[Any], logging_steps: int = 1
          ) -> transformers.Trainer:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
        bos_token_id=0, eos_token_id=0,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp / "hf"), max_steps=steps, per_device_train_batch_size=4,
        logging_steps=logging_steps, logging_nan_inf_filter=False, eval_strategy="steps",
        eval_steps=10,
        per_device_eval_batch_size=8, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, learning_rate=1e-3, run_name="tiny-gpt2",
    )
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=Tokens(256), eval_dataset=Tokens(8, seed=1), callbacks=callbacks,
    )
    trainer.train()
    return trainer


def gate_policy(tmp: Path) -> Path:
    return policy(tmp / "policy.yaml", "train/loss", "train/grad_norm", extra="""
          - id: eval-loss-finite
            metric: eval/loss
            check: {finite: true}
    """)


def test_healthy_run_passes_and_matches_check(tmp_path: Path) -> None:
    pol = gate_policy(tmp_path)
    record = Record()
    gate = GatekeeperCallback(pol, reports=ReportOptions(json_path=str(tmp_path / "gate.json"),
                                                         quiet=True))
    trainer = train(tmp_path, 24, [record, gate])
    assert trainer.state.global_step == 24
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["status"] == "pass"
    assert report["stopped"] is None
    by_rule = {r["rule"]: r for r in report["results"]}
    evals = [s for s, _ in record.recorder.series["eval/loss"]]
    assert evals[:2] == [10, 20]  # and at the last step
    assert by_rule["eval-loss-finite"]["judged"] == len(evals)
    assert by_rule["loss-finite"]["judged"] == 24
    cli = check_results(record.recorder.write(tmp_path / "run.jsonl"), pol, tmp_path / "c.json")
    assert cli["status"] == "pass"
    assert comparable(report) == comparable(cli)


@pytest.mark.parametrize(("mode", "last_step"), [("async", 14), ("sync", 13)])
def test_nan_run_stops_at_the_offending_step(tmp_path: Path, mode: str, last_step: int) -> None:
    """A NaN at step 13: sync stops after step 13, async (judged while step 14 runs)
    after step 14; both report step 13."""
    pol = gate_policy(tmp_path)
    record = Record()
    gate = GatekeeperCallback(pol, mode=mode,
                              reports=ReportOptions(json_path=str(tmp_path / "gate.json"),
                                                    junit_path=str(tmp_path / "gate.xml"),
                                                    quiet=True))
    trainer = train(tmp_path, 40, [Poison(at=13), record, gate])
    assert trainer.state.global_step == last_step
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["status"] == "error"
    assert report["stopped"]["rule"] == "trainer-health/loss-finite"
    assert report["stopped"]["step"] == 13
    assert report["stopped"]["step_key"] == "train/global_step"
    assert report["stopped"]["value"] == "NaN"
    failing = {r["rule"] for r in report["results"] if r["status"] == "error"}
    assert failing == {"loss-finite", "grad-norm-finite", "loss-sane"}  # NaN: error in all
    assert "train/global_step 13" in {r["rule"]: r for r in report["results"]}["loss-finite"][
        "message"]
    assert "loss-finite" in (tmp_path / "gate.xml").read_text()
    cli = check_results(record.recorder.write(tmp_path / "run.jsonl"), pol, tmp_path / "c.json")
    assert cli["status"] == "error"
    assert comparable(report) == comparable(cli)


def test_raise_mode_raises_after_writing_the_reports(tmp_path: Path) -> None:
    gate = GatekeeperCallback(gate_policy(tmp_path), on_fail="raise",
                              reports=ReportOptions(json_path=str(tmp_path / "gate.json"),
                                                    quiet=True))
    with pytest.raises(GateFailed) as info:
        train(tmp_path, 40, [Poison(at=3), gate])
    assert info.value.verdict.failing()[0].step == 3
    assert json.loads((tmp_path / "gate.json").read_text())["stopped"]["step"] == 3


def test_a_step_that_does_not_log_awaits_the_judgement_at_its_end(tmp_path: Path) -> None:
    """logging_steps=3: steps 3, 6, .., 15 log; the NaN of step 13 first shows in the log
    of step 15 (its mean loss), judged while step 16 runs; step 16 does not log, so its
    `on_step_end` awaits the judgement and the run stops after step 16."""
    pol = gate_policy(tmp_path)
    gate = GatekeeperCallback(pol, reports=ReportOptions(json_path=str(tmp_path / "gate.json"),
                                                         quiet=True))
    trainer = train(tmp_path, 40, [Poison(at=13), gate], logging_steps=3)
    assert trainer.state.global_step == 16
    assert json.loads((tmp_path / "gate.json").read_text())["stopped"]["step"] == 15


class Placement(transformers.TrainerCallback):
    """Placed after the gate's callback: what its hand-over holds at each hook."""

    def __init__(self, gate: GatekeeperCallback):
        self.handoff = gate.gate._handoff
        self.held: list[tuple[str, int, int]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "loss" in (logs or {}):
            self.held.append(("log", state.global_step, len(self.handoff._held)))

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.held.append(("pre-optimizer", state.global_step, len(self.handoff._held)))


def test_async_hands_a_step_to_the_judge_once_the_next_backward_is_queued(
    tmp_path: Path,
) -> None:
    """transformers 5.25 `_inner_training_loop`: `on_pre_optimizer_step` runs after the
    step's backward, `on_log` after `on_step_end` and the loss `.item()`."""
    gate = GatekeeperCallback(gate_policy(tmp_path), reports=ReportOptions(quiet=True))
    placement = Placement(gate)
    train(tmp_path, 4, [gate, placement])
    assert placement.held == [
        ("pre-optimizer", 0, 0), ("log", 1, 1),  # step 1's values held at its log
        ("pre-optimizer", 1, 0), ("log", 2, 1),  # and released in step 2
        ("pre-optimizer", 2, 0), ("log", 3, 1),
        ("pre-optimizer", 3, 0), ("log", 4, 1),
    ]


def test_logged_names_are_worked_out_once_and_the_same_every_step(tmp_path: Path) -> None:
    """`on_log`'s names (transformers 5.25 `WandbCallback.rewrite_logs`): the run's
    summary keys and anything not one number are left out, `eval_`/`test_` become
    `eval/`/`test/`, the rest `train/`; the second step gets the same names from the kept
    ones, and `wandb_names=False` keeps the keys as they are (an empty one included)."""
    logs = {"loss": 1.5, "eval_loss": 2.0, "test_acc": 0.5, "train_runtime": 9.0,
            "note": "text", "grad_norm": torch.tensor(3.0), "": 4.0}
    cb = GatekeeperCallback(str(gate_policy(tmp_path)), mode="sync")
    want = {"train/loss": 1.5, "eval/loss": 2.0, "test/acc": 0.5, "train/grad_norm": 3.0,
            "train/": 4.0}
    for _ in range(2):
        assert {k: float(v) for k, v in cb._series(logs).items()} == want
    assert cb._series({"loss": [1.0, 2.0]}) == {}
    plain = GatekeeperCallback(str(gate_policy(tmp_path)), mode="sync", wandb_names=False)
    for _ in range(2):
        assert list(plain._series(logs)) == ["loss", "eval_loss", "test_acc", "grad_norm", ""]
    cb.finish()
    plain.finish()
