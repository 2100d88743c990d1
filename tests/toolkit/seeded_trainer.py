"""Train one recipe with several seeds: a tiny GPT-2 under the real `transformers.Trainer`
on CPU, each run's logs written as a JSONL record file (a child process of the tests).

    python seeded_trainer.py OUTDIR STEPS SEED... [--broken SEED --nan-at S]

Mirrors transformers 5.x `Trainer.log` with `logging_steps=1` and an eval every 10 steps:
`loss`, `grad_norm`, `learning_rate`, `epoch` per step, `eval_loss`/`eval_runtime`/
`eval_samples_per_second`/`eval_steps_per_second` per eval, `train_runtime`/
`train_samples_per_second`/`train_steps_per_second`/`total_flos`/`train_loss` at the end,
named as WandbCallback names them (`train/loss`, `eval/runtime`) on `train/global_step`.
The seed sets the model's init and the data order (`seed`, `data_seed`); the data is fixed.
`seed-N.jsonl` per seed; `--broken SEED` also trains `nan-SEED.jsonl`, whose embeddings turn
NaN before step `--nan-at`: from there on, loss and grad norm are NaN (a diverged run).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch
import transformers

from gatekeeper.integrations.hf import rewrite_logs

VOCAB, SEQ = 64, 16


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(self.seed * 10_000 + i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "labels": ids}


class Record(transformers.TrainerCallback):
    """metric -> {step: value}: `epoch` rides on every log line, once per step is enough."""

    def __init__(self, nan_at: int | None):
        self.series: dict[str, dict[int, float]] = {}
        self.nan_at = nan_at

    def on_step_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
        if state.global_step + 1 == self.nan_at:
            with torch.no_grad():
                model.transformer.wte.weight.fill_(float("nan"))

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        for name, value in rewrite_logs(logs or {}).items():
            self.series.setdefault(name, {})[state.global_step] = float(value)

    def write(self, path: Path) -> None:
        def cell(v: float) -> Any:
            return v if math.isfinite(v) else ("NaN" if math.isnan(v) else f"{v}")

        with open(path, "w") as fh:
            for name, points in self.series.items():
                series = [[s, cell(v)] for s, v in sorted(points.items())]
                line = {"metric": name, "step_key": "train/global_step", "series": series}
                fh.write(json.dumps(line) + "\n")
            fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")


def train(out: Path, steps: int, seed: int, nan_at: int | None) -> None:
    transformers.set_seed(seed)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(out / "hf"), max_steps=steps, per_device_train_batch_size=4,
        logging_steps=1, logging_nan_inf_filter=False, eval_strategy="steps", eval_steps=10,
        per_device_eval_batch_size=8, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, learning_rate=1e-3, seed=seed, data_seed=seed,
    )  # fmt: skip
    record = Record(nan_at)
    transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Tokens(256),
        eval_dataset=Tokens(8, seed=1), callbacks=[record],
    ).train()  # fmt: skip
    record.write(out / (f"seed-{seed}.jsonl" if nan_at is None else f"nan-{seed}.jsonl"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("steps", type=int)
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--broken", type=int, default=None)
    ap.add_argument("--nan-at", type=int, default=12)
    a = ap.parse_args()
    for seed in a.seeds:
        train(a.out, a.steps, seed, None)
    if a.broken is not None:
        train(a.out, a.steps, a.broken, a.nan_at)


if __name__ == "__main__":
    main()
