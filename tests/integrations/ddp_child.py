"""One rank of a two-process CPU (gloo) training job, for tests/integrations/test_ddp.py,
which starts both ranks itself with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; the test process hosts the rendezvous store):

    python ddp_child.py FRAMEWORK OUT NAN_AT STEPS MODE [MODE ...]

FRAMEWORK: hf or lightning. Each MODE is one training run, in order, in this one process
group: none (no gate), async or sync; a mode may come again. At step NAN_AT rank 1 alone
sees a NaN: HF's rank 1 turns its weights NaN (the Trainer averages the loss over ranks
before logging it, so both ranks log it); Lightning's rank 1 logs a NaN `train_loss` that
no other rank sees (the loss it trains on stays finite). Every `torch.distributed`
collective called from Python is counted (wrappers installed before any framework is
imported): DDP's gradient all-reduce runs in C++ and is the same with or without the gate.
Each rank writes OUT/rank-R.json: per run, in order, the last step and the collectives
counted at each step end since the run started; run I's gate reports go to
OUT/I-MODE/gate-R.json.

The process leaves with `os._exit` once both ranks have written their results: torch
2.13's `ProcessGroupGloo` destructor joins its worker threads while the caller holds the
GIL, and a worker that is still releasing a finished all-gather (whose tensors belong to
Python) waits for the GIL: a deadlock when the group is freed from Python (seen with the
HF Trainer), SIGABRT ("terminate called without an active exception") when it is freed at
interpreter exit. Nothing of the gate is involved; see test_ddp.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """This rank is killed when the test process dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(os.environ["DDP_TEST_PARENT"]):  # it died before the prctl
        os._exit(3)


die_with_parent()

import torch  # noqa: E402 - after the death signal: torch takes seconds to import
import torch.distributed as dist  # noqa: E402
from torch.distributed import distributed_c10d  # noqa: E402

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

FRAMEWORK, OUT, NAN_AT, STEPS, MODES = (
    sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
POLICY = OUT / "policy.yaml"
RANK = int(os.environ["RANK"])


class Counts:
    """The collectives counted at each step end, from the start of one run."""

    def __init__(self) -> None:
        self.base = len(CALLS)
        self.per_step: list[int] = []

    def start(self) -> None:
        self.base = len(CALLS)

    def step_end(self) -> None:
        self.per_step.append(len(CALLS) - self.base)


def gate_callback(module: Any, run: Path, mode: str) -> list[Any]:
    if mode == "none":
        return []
    from gatekeeper.gate import ReportOptions

    # one report path per rank: the test sees which rank wrote
    reports = ReportOptions(json_path=str(run / f"gate-{RANK}.json"))
    return [module.GatekeeperCallback(str(POLICY), mode=mode, reports=reports, echo=False)]


def run_hf(run: Path, mode: str) -> dict[str, Any]:
    import transformers

    from gatekeeper.integrations import hf

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 512

        def __getitem__(self, i: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    class Probe(transformers.TrainerCallback):
        """Poisons rank 1 before step NAN_AT; counts collectives from train begin (after
        the Trainer's own setup, before the gate's hooks: the probe is the first
        callback) to each step end."""

        def __init__(self) -> None:
            self.counts = Counts()

        def on_train_begin(self, args, state, control, **kwargs):
            self.counts.start()

        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if RANK == 1 and state.global_step + 1 == NAN_AT:
                with torch.no_grad():
                    model.transformer.wte.weight.fill_(float("nan"))

        def on_step_end(self, args, state, control, **kwargs):
            self.counts.step_end()

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16, bos_token_id=0, eos_token_id=0)
    args = transformers.TrainingArguments(
        output_dir=str(run / "hf"), max_steps=STEPS, per_device_train_batch_size=4,
        logging_steps=1, logging_nan_inf_filter=False, report_to=[], save_strategy="no",
        use_cpu=True, ddp_backend="gloo", disable_tqdm=True, learning_rate=1e-3,
    )
    probe = Probe()
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Tokens(),
        callbacks=[probe, *gate_callback(hf, run, mode)],
    )
    trainer.train()
    return {"last_step": trainer.state.global_step, "collectives": probe.counts.per_step}


def run_lightning(run: Path, mode: str) -> dict[str, Any]:
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
        """Counts collectives from fit start (after Lightning's setup, before the gate's
        hooks: the probe is the first callback) to each batch end."""

        def __init__(self) -> None:
            self.counts = Counts()
            self.last = 0

        def on_fit_start(self, trainer, pl_module):
            self.counts.start()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.counts.step_end()
            self.last = trainer.fit_loop.epoch_loop._batches_that_stepped

    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=g)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=4)
    probe = Probe()
    trainer = pl.Trainer(
        max_steps=STEPS, accelerator="cpu", devices=2, strategy="ddp", logger=False,
        callbacks=[probe, *gate_callback(lightning, run, mode)],
        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
        default_root_dir=str(run / "pl"), num_sanity_val_steps=0, limit_val_batches=0,
    )
    trainer.fit(Regressor(), loader)
    return {"last_step": probe.last, "collectives": probe.counts.per_step}


def main() -> None:
    runs = []
    for i, mode in enumerate(MODES):
        run = OUT / f"{i}-{mode}"
        run.mkdir(exist_ok=True)
        runs.append((run_hf if FRAMEWORK == "hf" else run_lightning)(run, mode))
    (OUT / f"rank-{RANK}.json").write_text(json.dumps({"rank": RANK, "runs": runs}))
    dist.barrier()  # neither rank leaves while the other may still be in a collective
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not through the process group's destructor: see the module docstring


if __name__ == "__main__":
    main()
