"""One rank of a two-process CPU (gloo) training run, for tests/integrations/test_ddp.py.

    python -m torch.distributed.run --nproc_per_node 2 ddp_child.py hf OUT MODE NAN_AT STEPS
    python ddp_child.py lightning OUT MODE NAN_AT STEPS     # Lightning starts rank 1 itself

MODE: none (no gate), async or sync. At step NAN_AT rank 1 alone sees a NaN: HF's rank 1
turns its weights NaN (the Trainer averages the loss over ranks before logging it, so
both ranks log it); Lightning's rank 1 logs a NaN `train_loss` that no other rank sees
(the loss it trains on stays finite). Every `torch.distributed` collective called from
Python is counted (wrappers installed before any framework is imported): DDP's gradient
all-reduce runs in C++ and is the same with or without the gate. Each rank writes
OUT/rank-R.json: the last step, the collectives counted at each step boundary.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
    "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "barrier", "all_to_all",
    "all_to_all_single", "monitored_barrier",
)
CALLS: list[str] = []


def count_collectives() -> None:
    for name in COLLECTIVES:
        original = getattr(dist, name)

        def wrapper(*args: Any, _name: str = name, _fn: Any = original, **kwargs: Any) -> Any:
            CALLS.append(_name)
            return _fn(*args, **kwargs)

        setattr(dist, name, wrapper)
        setattr(distributed_c10d, name, wrapper)


count_collectives()

FRAMEWORK, OUT, MODE, NAN_AT, STEPS = (
    sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
POLICY = OUT / "policy.yaml"


def gate_callback(module: Any, rank: int) -> list[Any]:
    if MODE == "none":
        return []
    from gatekeeper.gate import ReportOptions

    # one report path per rank: the test sees which rank wrote
    reports = ReportOptions(json_path=str(OUT / f"gate-{rank}.json"))
    return [module.GatekeeperCallback(str(POLICY), mode=MODE, reports=reports, echo=False)]


def write(rank: int, last_step: int, per_step: list[int]) -> None:
    (OUT / f"rank-{rank}.json").write_text(json.dumps(
        {"rank": rank, "last_step": last_step, "collectives": per_step, "calls": CALLS}))


def run_hf() -> None:
    import transformers

    from gatekeeper.integrations import hf

    rank = int(os.environ["RANK"])

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 512

        def __getitem__(self, i: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    class Probe(transformers.TrainerCallback):
        """Poisons rank 1 before step NAN_AT; counts collectives at each step end."""

        def __init__(self) -> None:
            self.per_step: list[int] = []

        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if rank == 1 and state.global_step + 1 == NAN_AT:
                with torch.no_grad():
                    model.transformer.wte.weight.fill_(float("nan"))

        def on_step_end(self, args, state, control, **kwargs):
            self.per_step.append(len(CALLS))

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16, bos_token_id=0, eos_token_id=0)
    args = transformers.TrainingArguments(
        output_dir=str(OUT / "hf"), max_steps=STEPS, per_device_train_batch_size=4,
        logging_steps=1, logging_nan_inf_filter=False, report_to=[], save_strategy="no",
        use_cpu=True, ddp_backend="gloo", disable_tqdm=True, learning_rate=1e-3,
    )
    probe = Probe()
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Tokens(),
        callbacks=[probe, *gate_callback(hf, rank)],
    )
    trainer.train()
    write(rank, trainer.state.global_step, probe.per_step)
    # the Trainer leaves the gloo group to the interpreter's exit, where its threads were
    # once torn down mid-flight ("terminate called without an active exception", SIGABRT
    # on one rank after both had written their results): tear it down here
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run_lightning() -> None:
    import lightning.pytorch as pl

    from gatekeeper.integrations import lightning

    class Regressor(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            seen = loss.detach()
            if self.global_rank == 1 and self.trainer.global_step == NAN_AT:
                seen = seen * float("nan")  # only rank 1 sees it
            self.log("train_loss", seen)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Probe(pl.Callback):
        def __init__(self) -> None:
            self.per_step: list[int] = []
            self.last = 0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.per_step.append(len(CALLS))
            self.last = trainer.fit_loop.epoch_loop._batches_that_stepped

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    probe = Probe()
    trainer = pl.Trainer(
        max_steps=STEPS, accelerator="cpu", devices=2, strategy="ddp", logger=False,
        callbacks=[probe, *gate_callback(lightning, int(os.environ.get("LOCAL_RANK", 0)))],
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
        default_root_dir=str(OUT / "pl"), num_sanity_val_steps=0, limit_val_batches=0,
    )
    trainer.fit(Regressor(), loader)
    write(trainer.global_rank, probe.last, probe.per_step)


if __name__ == "__main__":
    run_hf() if FRAMEWORK == "hf" else run_lightning()
