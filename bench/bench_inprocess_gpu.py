"""What the in-process gate costs a training step (issue 30): the same GPT-2-shaped model
trained by several loops, interleaved, each repetition a fresh model.

    python bench/bench_inprocess_gpu.py                  # CUDA: small (6x512, B8 T256)
    python bench/bench_inprocess_gpu.py --size bigger    # CUDA: 12x512, B16 T512
    python bench/bench_inprocess_gpu.py --quick          # CPU smoke run, tiny sizes

Loops: plain (the metric tensors computed, never read) · item (`loss.item()`,
`grad_norm.item()` and an assert: the trainer's own check) · gate (`Gate.feed`, mode
async, the default) · gate-held (`submit(hold=True)` at a step's end, `release()` once
the next backward is queued, `wait` for the previous step's ticket: no sender thread) ·
gate-sync (`Gate.feed`, mode sync) · hf (Trainer, logging_steps=1)
· hf+cb (+ `GatekeeperCallback`) · hf+cb-eager (the callback handing each step over at
its log and awaiting it at the next step's end: the placement before the hold, for
comparison) · pl (Lightning, `self.log(on_step=True)`) · pl+cb. Diagnostics:
gate-lite (`Gate.feed` of the same metrics to a 1-rule policy: the judge process's own
CPU apart) and gate+batch, hf+cb+batch (the judge process set to SCHED_BATCH: woken on
the trainer's CPU, it does not preempt it).
Every loop computes the same 14 metrics (loss, grad_norm, learning_rate and 11 more);
the gated ones judge them with bench/inprocess_policy.yaml (20 rules). Random weights
and tokens, AdamW, bf16 autocast on CUDA; timing covers N steps after 20 warm-up steps
(the device synchronized at both ends: the end is the last step's end, so a trainer's
end of training — the gate's `finalize` included — is timed apart, "after the last
step"). Beside the rates, per timed step: the wall time, the process's CPU, the training
thread's CPU, the time the gate's calls take on the training thread (by hook) and a
judging worker's CPU (a gate judging on a thread; the default judge process is fed by
the training thread: its share is in the calls). `--blocks K` also measures each loop
within its own runs: the gate (or the assert) gets the metrics in half the blocks of
K steps, and the median step time of those blocks is set against the others' — the
same process and minute on both sides, where separate runs of one loop spread ~40 % on
the lent machine. Then each loop runs once more with a NaN loss at step 60, and the
table says where it stopped and which step the gate reported.
Offline: only torch, transformers, lightning and gatekeeper are imported.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
POLICY = str(ROOT / "bench" / "inprocess_policy.yaml")
LITE = str(ROOT / "bench" / "inprocess_policy_lite.yaml")  # one rule: the judge's CPU apart
SIZES = {  # layers, width, batch, tokens, vocabulary
    "small": (6, 512, 8, 256, 50257),
    "bigger": (12, 512, 16, 512, 50257),
    "quick": (2, 64, 4, 32, 512),
}
LOOPS = ("plain", "item", "gate", "gate-held", "gate-sync", "gate-lite", "gate+batch", "hf",
         "hf+cb", "hf+cb-eager", "hf+cb+batch", "pl", "pl+cb")
BASELINE = {"item": "plain", "gate": "plain", "gate-held": "plain", "gate-sync": "plain",
            "gate-lite": "plain", "gate+batch": "plain", "hf+cb": "hf", "hf+cb-eager": "hf",
            "hf+cb+batch": "hf", "pl+cb": "pl"}


TICKS: list[float] = []  # the clock at each timed step's end (no sync): the step cadence
TICK_STEPS: list[int] = []  # the step each tick ended
BLOCKS = [0]  # --blocks K: gated loops judge only in half the blocks of K steps (ABBA)
# per loop run: seconds in the gate's calls on the training thread / the worker's CPU,
# over the timed steps; seconds from the last step's end to the trainer's return
COST = {"hooks": 0.0, "worker": 0.0, "tail": 0.0}


def tick(step: int, warmup: int) -> None:
    if step >= warmup:
        TICKS.append(time.perf_counter())
        TICK_STEPS.append(step)


def gated(step: int) -> bool:
    """--blocks K: is `step` in a block whose metrics the gate (or the assert) gets? Off
    blocks run the same loop with the gate handed nothing (its hooks still called). The
    blocks go on, off, off, on (ABBA), so a steady drift over the run (clocks, caches
    warming) falls on both halves alike instead of favouring the off blocks."""
    k = BLOCKS[0]
    return k == 0 or (step // k) % 4 in (0, 3)


SETTLE = 3  # a block's first steps carry the previous block's gate work: not counted


def block_ratio() -> float:
    """--blocks: the gated blocks' speed as a fraction of the ungated ones' in this run
    (median step time off / on), steps past the first SETTLE of each block only: the
    same model, process and minute on both sides, so drift between runs cancels."""
    k = BLOCKS[0]
    times: dict[bool, list[float]] = {True: [], False: []}
    for (a, b), step in zip(zip(TICKS, TICKS[1:], strict=False), TICK_STEPS[1:], strict=False):
        if step % k >= SETTLE:
            times[gated(step)].append(b - a)
    if not times[True] or not times[False]:
        return 0.0
    return statistics.median(times[False]) / statistics.median(times[True])


PROFILE: list[cProfile.Profile] = []  # --profile: the profiler of the loop running now


CLOCKS = (time.process_time, time.thread_time, time.perf_counter)
MARK: list[float] = []  # the clocks at the start of the timed steps


def profile(on: bool) -> None:
    """The timed steps begin (on) or end: the training thread's profile covers them only;
    the process's CPU, the training thread's CPU and the wall time over them go to COST."""
    for profiler in PROFILE:
        profiler.enable() if on else profiler.disable()
    if on:
        MARK[:] = [clock() for clock in CLOCKS]
    elif MARK:
        for key, clock, start in zip(("cpu", "train", "wall"), CLOCKS, MARK, strict=True):
            COST[key] = clock() - start
        MARK.clear()


def timed(fn: Callable[..., Any], key: str, clock: Callable[[], float] = time.perf_counter
          ) -> Callable[..., Any]:
    """`fn`, its time added to COST[key] while the timed steps run (TICKS started)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not TICKS:
            return fn(*args, **kwargs)
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = clock() - t
            COST[key] = COST.get(key, 0.0) + spent
            if key.startswith("hook:"):  # one of a callback's hooks: also their total
                COST["hooks"] += spent
    return wrapper


def instrument(g: Any) -> Any:
    """The gate's worker-side judging timed in worker CPU (thread time)."""
    handoff = g._handoff
    handoff._judge = timed(handoff._judge, "worker", time.thread_time)
    return g


def instrument_callback(cb: Any, hooks: tuple[str, ...]) -> Any:
    instrument(cb.gate)
    for name in hooks:
        setattr(cb, name, timed(getattr(cb, name), f"hook:{name}"))
    return cb


def cadence() -> float:
    """Steps/s from the median interval between step ends: robust to a hiccup (another
    tenant, a collection) that moves the mean; equals the mean rate in steady state."""
    gaps = [b - a for a, b in zip(TICKS, TICKS[1:], strict=False)]
    return 1.0 / statistics.median(gaps) if gaps else 0.0


class Bench:
    def __init__(self, size: str, device: str, warmup: int):
        self.layers, self.width, self.batch, self.tokens, self.vocab = SIZES[size]
        self.device = device
        self.cuda = device == "cuda"
        self.warmup = warmup

    def model(self) -> Any:
        import transformers

        torch.manual_seed(0)
        config = transformers.GPT2Config(
            n_layer=self.layers, n_embd=self.width, n_head=max(self.width // 64, 1),
            vocab_size=self.vocab, n_positions=self.tokens, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(config).to(self.device)

    def ids(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(1)
        return torch.randint(0, self.vocab, (self.batch, self.tokens), generator=g).to(
            self.device)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class Extras:
    """The 11 metrics beyond loss, grad_norm and learning_rate, as device tensors."""

    def __init__(self, model: Any, tokens: int):
        self.model, self.tokens = model, tokens
        self.loss_ema: Any = None
        self.grad_ema: Any = None
        self.prev: Any = None
        self.seen = 0

    def __call__(self, loss: Any, grad_norm: Any, lr: float, epoch: float) -> dict[str, Any]:
        loss, grad_norm = loss.detach().float(), torch.as_tensor(grad_norm).detach().float()
        self.loss_ema = loss if self.loss_ema is None else 0.9 * self.loss_ema + 0.1 * loss
        self.grad_ema = grad_norm if self.grad_ema is None else (
            0.9 * self.grad_ema + 0.1 * grad_norm)
        delta = loss - (loss if self.prev is None else self.prev)
        self.prev = loss
        self.seen += self.tokens
        t = self.model.transformer
        with torch.no_grad():
            return {
                "train/ppl": torch.exp(loss), "train/loss_ema": self.loss_ema,
                "train/grad_norm_ema": self.grad_ema, "train/loss_delta": delta,
                "train/wte_norm": torch.linalg.vector_norm(t.wte.weight),
                "train/wpe_norm": torch.linalg.vector_norm(t.wpe.weight),
                "train/ln_f_norm": torch.linalg.vector_norm(t.ln_f.weight),
                "train/tokens": float(self.seen), "train/epoch": epoch,
                "train/clip_ratio": torch.clamp(1.0 / (grad_norm + 1e-6), max=1.0),
                "train/update_scale": lr * grad_norm,
            }


def gate(mode: str = "async", policy: str = POLICY) -> Any:
    from gatekeeper.inprocess import Gate

    return instrument(Gate(policy, mode=mode, echo=False, axis="train/global_step"))


def batch_judge(g: Any) -> None:
    """`+batch` loops: the gate's judge process under SCHED_BATCH, set from here (a
    diagnostic: a woken batch task does not preempt the trainer on its CPU)."""
    if hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(g._judge._proc.pid, os.SCHED_BATCH, os.sched_param(0))


# ---- hand-written loops -------------------------------------------------------------------
def custom_loop(b: Bench, kind: str, steps: int, nan_at: int | None) -> tuple[float, int, Any]:
    """steps/s over the timed steps, the last step run, the step the gate reported."""
    model = b.model()
    ids = b.ids()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    extras = Extras(model, b.batch * b.tokens)
    g = None
    if kind.startswith("gate"):
        g = gate("sync" if kind == "gate-sync" else "async",
                 LITE if kind == "gate-lite" else POLICY)
        if kind.endswith("+batch"):
            batch_judge(g)
    start, last, previous = 0.0, 0, 0
    for step in range(1, b.warmup + steps + 1):
        if step == b.warmup + 1:
            b.sync()
            start = time.perf_counter()
            profile(True)
        with torch.autocast(b.device, dtype=torch.bfloat16, enabled=b.cuda):
            loss = model(input_ids=ids, labels=ids).loss
        if step == nan_at:
            loss = loss * float("nan")
        loss.backward()
        if kind == "gate-held":  # the last step's values, their copy landed by now
            timed(g.release, "hooks")()  # type: ignore[union-attr]
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        metrics = {"train/loss": loss, "train/grad_norm": grad_norm,
                   "train/learning_rate": 1e-4, **extras(loss, grad_norm, 1e-4, 0.0)}
        last = step
        tick(step, b.warmup)
        if kind == "item" and gated(step):
            if not (math.isfinite(loss.item()) and math.isfinite(grad_norm.item())):
                break  # the assert a trainer would raise
        elif kind == "gate-held" and gated(step):
            ticket = timed(g.submit, "hooks")(step, metrics, hold=True)  # type: ignore[union-attr]
            if previous and timed(g.wait, "hooks")(previous):  # type: ignore[union-attr]
                break
            previous = ticket
        elif g is not None and gated(step) and timed(g.feed, "hooks")(step, metrics):
            break
    b.sync()
    profile(False)
    rate = max(last - b.warmup, 0) / (time.perf_counter() - start)
    reported = None
    if g is not None:
        t = time.perf_counter()
        stopped = g.finalize(write=False).stopped
        COST["tail"] = time.perf_counter() - t
        reported = stopped["step"] if stopped else None
    elif kind == "item" and last == nan_at:
        reported = last
    return rate, last, reported


# ---- HF Trainer ---------------------------------------------------------------------------
def hf_loop(b: Bench, kind: str, steps: int, nan_at: int | None) -> tuple[float, int, Any]:
    import transformers

    from gatekeeper.integrations.hf import GatekeeperCallback

    ids = b.ids().cpu()

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 10**6

        def __getitem__(self, i: int) -> dict[str, Any]:
            row = ids[i % len(ids)]
            return {"input_ids": row, "labels": row}

    class NanTrainer(transformers.Trainer):
        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            if self.state.global_step + 1 == nan_at:
                loss = loss * float("nan")
            return loss

    class Clock(transformers.TrainerCallback):
        """Extras into the logs (as a user's callback would), the clock at the warm-up."""

        def __init__(self, model: Any):
            self.extras = Extras(model, b.batch * b.tokens)
            self.start = self.end = 0.0

        def on_step_end(self, args, state, control, **kwargs):
            tick(state.global_step, b.warmup)
            if state.global_step == b.warmup:
                b.sync()
                self.start = time.perf_counter()
                profile(True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None and "loss" in logs:
                logs.update({k.split("/", 1)[1]: v for k, v in self.extras(
                    torch.tensor(logs["loss"]), logs.get("grad_norm", 0.0),
                    logs.get("learning_rate", 0.0), logs.get("epoch", 0.0)).items()
                    if k != "train/epoch"})

        def on_train_end(self, args, state, control, **kwargs):
            b.sync()
            self.end = time.perf_counter()  # first in line: before the gate's finalize
            profile(False)


    model = b.model()
    clock = Clock(model)
    cb = []
    if kind.startswith("hf+cb"):
        cb = [instrument_callback(GatekeeperCallback(POLICY, echo=False),
                                  ("on_log", "on_pre_optimizer_step", "on_step_end"))]
        cb[0]._defer = kind != "hf+cb-eager"
        if kind.endswith("+batch"):
            batch_judge(cb[0].gate)
        on_log = cb[0].on_log

        def blocked_log(args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> Any:
            return on_log(args, state, control, logs=logs if gated(state.global_step) else None,
                          **kw)

        cb[0].on_log = blocked_log
    args = transformers.TrainingArguments(
        output_dir="/tmp/bench-inprocess-hf", max_steps=b.warmup + steps,
        per_device_train_batch_size=b.batch, logging_steps=1, logging_nan_inf_filter=False,
        report_to=[], save_strategy="no", use_cpu=not b.cuda, bf16=b.cuda,
        disable_tqdm=True, learning_rate=1e-4, lr_scheduler_type="constant",
        optim="adamw_torch", max_grad_norm=1.0, dataloader_num_workers=0, log_level="error")
    trainer = NanTrainer(model=model, args=args, train_dataset=Tokens(),
                         callbacks=[clock, *cb])
    trainer.remove_callback(transformers.PrinterCallback)
    trainer.train()
    b.sync()
    COST["tail"] = time.perf_counter() - clock.end
    last = trainer.state.global_step
    rate = max(last - b.warmup, 0) / (clock.end - clock.start)
    reported = None
    if cb:
        stopped = cb[0].gate.verdict().stopped
        reported = stopped["step"] if stopped else None
    return rate, last, reported


# ---- Lightning ----------------------------------------------------------------------------
def pl_loop(b: Bench, kind: str, steps: int, nan_at: int | None) -> tuple[float, int, Any]:
    import lightning.pytorch as pl

    from gatekeeper.integrations.lightning import GatekeeperCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = b.model()
            self.extras = Extras(self.net, b.batch * b.tokens)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            (ids,) = batch
            loss = self.net(input_ids=ids, labels=ids).loss
            if self.global_step == nan_at:
                loss = loss * float("nan")
            self.log("train/loss", loss, on_step=True)
            self.last_loss = loss
            return loss

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            norm = torch.linalg.vector_norm(torch.stack([
                torch.linalg.vector_norm(p.grad) for p in self.parameters()
                if p.grad is not None]))
            values = {"train/grad_norm": norm, "train/learning_rate": 1e-4,
                      **self.extras(self.last_loss, norm, 1e-4, float(self.current_epoch))}
            for name, value in values.items():
                self.log(name, value, on_step=True, on_epoch=False)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class Clock(pl.Callback):
        start = end = 0.0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            tick(trainer.global_step, b.warmup)
            if trainer.global_step == b.warmup:
                b.sync()
                self.start = time.perf_counter()
                profile(True)

        def on_train_end(self, trainer, pl_module):
            b.sync()
            self.end = time.perf_counter()  # first in line: before the gate's finalize
            profile(False)

    ids = b.ids()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(ids.repeat(64, 1)), batch_size=b.batch)
    clock = Clock()
    cb = []
    if kind == "pl+cb":
        cb = [instrument_callback(GatekeeperCallback(POLICY, echo=False),
                                  ("on_train_batch_start", "on_before_backward",
                                   "on_train_batch_end"))]
        batch_end = cb[0].on_train_batch_end

        def blocked_end(trainer: Any, *args: Any) -> Any:
            return batch_end(trainer, *args) if gated(trainer.global_step) else None

        cb[0].on_train_batch_end = blocked_end
    trainer = pl.Trainer(
        max_steps=b.warmup + steps, accelerator="gpu" if b.cuda else "cpu", devices=1,
        precision="bf16-mixed" if b.cuda else "32-true", logger=False, log_every_n_steps=50,
        gradient_clip_val=1.0, callbacks=[clock, *cb], enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
        limit_val_batches=0, default_root_dir="/tmp/bench-inprocess-pl")
    trainer.fit(Module(), loader)
    b.sync()
    COST["tail"] = time.perf_counter() - clock.end
    last = trainer.global_step
    rate = max(last - b.warmup, 0) / (clock.end - clock.start)
    reported = None
    if cb:
        stopped = cb[0].gate.verdict().stopped
        reported = stopped["step"] if stopped else None
    return rate, last - 1, reported  # the last logger step run (0-based)


RUNNERS: dict[str, Callable[[Bench, str, int, int | None], tuple[float, int, Any]]] = {
    "plain": custom_loop, "item": custom_loop, "gate": custom_loop, "gate-sync": custom_loop,
    "gate-held": custom_loop, "gate-lite": custom_loop, "gate+batch": custom_loop,
    "hf": hf_loop, "hf+cb": hf_loop, "hf+cb-eager": hf_loop, "hf+cb+batch": hf_loop,
    "pl": pl_loop, "pl+cb": pl_loop,
}


def table(rates: dict[str, list[float]]) -> list[str]:
    reps = len(next(iter(rates.values())))
    lines = ["| loop (steps/s) | " + " | ".join(f"rep {i + 1}" for i in range(reps))
             + " | median | spread (min-max) | ratio to baseline (medians; paired reps) |",
             "|---|" + "---|" * (reps + 3)]
    for loop, values in rates.items():
        median = statistics.median(values)
        base = BASELINE.get(loop)
        ratio = ""
        if base in rates:
            base_median = statistics.median(rates[base])
            paired = sorted(v / w for v, w in zip(values, rates[base], strict=True))
            ratio = (f"{median / base_median:.3f}x of {base}; paired per rep: median "
                     f"{statistics.median(paired):.3f}x, {paired[0]:.2f}-{paired[-1]:.2f}")
        lines.append(f"| {loop} | " + " | ".join(f"{v:.1f}" for v in values)
                     + f" | {median:.1f} | {min(values):.1f}-{max(values):.1f} | {ratio} |")
    return lines


def block_table(ratios: dict[str, list[float]], k: int) -> list[str]:
    """--blocks: each run's gated blocks against its own ungated ones."""
    reps = len(next(iter(ratios.values())))
    lines = [f"\nWithin each run (--blocks {k}): speed of the blocks where the gate (item: the "
             "assert) gets the metrics, relative to the blocks where it gets none; median "
             f"step time of each, the first {SETTLE} steps of every block left out. An ungated "
             "loop's figure is the noise floor (both halves alike).\n",
             "| loop | " + " | ".join(f"rep {i + 1}" for i in range(reps))
             + " | median | spread (min-max) |", "|---|" + "---|" * (reps + 2)]
    for loop, values in ratios.items():
        lines.append(f"| {loop} | " + " | ".join(f"{v:.3f}x" for v in values)
                     + f" | **{statistics.median(values):.3f}x** | "
                       f"{min(values):.3f}-{max(values):.3f} |")
    return lines


def cost_table(costs: dict[str, list[dict[str, float]]], steps: int) -> list[str]:
    """Medians over the repetitions of the gate's own costs."""
    lines = ["\nWhere the gate's time goes (medians over the repetitions):\n",
             "| loop | wall (us/step) | process CPU (us/step) | training thread CPU (us/step) "
             "| gate calls on the training thread (us/step) | judging worker CPU, "
             "judge=\"thread\" (us/step) | after the last step (ms; a trainer's end, "
             "finalize included) | by hook (us/step) |",
             "|---|---|---|---|---|---|---|---|"]
    for loop, runs in costs.items():
        med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
        hooks = ", ".join(f"{k[5:]} {v / steps * 1e6:.0f}" for k, v in med.items()
                          if k.startswith("hook:"))
        per = {k: f"{med.get(k, 0.0) / steps * 1e6:.0f}" for k in ("wall", "cpu", "train")}
        lines.append(f"| {loop} | {per['wall']} | {per['cpu']} | {per['train']} | "
                     f"{med['hooks'] / steps * 1e6:.0f} | "
                     f"{med['worker'] / steps * 1e6:.0f} | {med['tail'] * 1e3:.0f} | {hooks} |")
    return lines


def profile_table(loop: str, stats: pstats.Stats, top: int, steps: int) -> list[str]:
    """The training thread's costliest functions (own time) over the timed steps, per step."""
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [f"\nProfile of {loop} (training thread, own time per step):\n",
             "| function | calls/step | us/step |", "|---|---|---|"]
    for (file, line, func), (_, calls, own, _, _) in rows:
        where = f"{Path(file).name}:{line}({func})" if line else func
        lines.append(f"| {where} | {calls / steps:.1f} | {own / steps * 1e6:.0f} |")
    return lines + gate_profile(loop, stats, top, steps)


def gate_profile(loop: str, stats: pstats.Stats, top: int, steps: int) -> list[str]:
    """The gate's side of the profile: each gatekeeper function's own time, and the time
    of each call it makes out of the package (torch, orjson, os...), with its callees."""
    mine = str(ROOT / "gatekeeper")
    costs: dict[str, tuple[float, float]] = {}  # where -> (calls, seconds)
    for (file, line, func), (_, calls, own, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if file.startswith(mine):
            where = f"{Path(file).name}:{line}({func}) own"
            costs[where] = (calls, own)
            continue
        for (cfile, cline, cfunc), (_, ccalls, _, ccum) in callers.items():
            if cfile.startswith(mine):
                name = f"{Path(file).name}:{line}({func})" if line else func
                where = f"{name} from {Path(cfile).name}:{cline}({cfunc})"
                costs[where] = (ccalls, ccum)
    rows = sorted(costs.items(), key=lambda kv: kv[1][1], reverse=True)[:top]
    lines = [f"\nThe gate's side of {loop}'s profile (gatekeeper's own time, and its calls "
             "out of the package with their callees), per step:\n",
             "| function | calls/step | us/step |", "|---|---|---|"]
    for where, (calls, seconds) in rows:
        lines.append(f"| {where} | {calls / steps:.1f} | {seconds / steps * 1e6:.0f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("small", "bigger"), default="small")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run, tiny sizes")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="timed steps (after warm-up)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--nan-at", type=int, default=60)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the training thread (cProfile) and print each loop's "
                             "N costliest functions per step (slows every loop)")
    parser.add_argument("--blocks", type=int, default=0, metavar="K",
                        help="also measure each loop within its own runs: the gate (or the "
                             "assert) gets the metrics in half the blocks of K steps only "
                             "(on, off, off, on), and the table gives the speed of those "
                             "blocks relative to the others (ungated loops: the noise floor)")
    opts = parser.parse_args()
    BLOCKS[0] = opts.blocks
    device = "cuda" if torch.cuda.is_available() and not opts.quick else "cpu"
    size = "quick" if opts.quick or device == "cpu" else opts.size
    steps = opts.steps or (30 if size == "quick" else 300)
    loops = [name for name in opts.loops.split(",") if name]
    unknown = sorted(set(loops) - set(LOOPS))
    if unknown:
        parser.error(f"unknown loops {unknown}; choose from {', '.join(LOOPS)}")
    if device == "cpu":
        torch.set_num_threads(1)  # a shared CI machine: no thread oversubscription
    bench = Bench(size, device, opts.warmup)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"# in-process gate bench: {gpu}, size {size} {SIZES[size][:4]}, {opts.reps} reps "
          f"x {steps} steps after {opts.warmup} warm-up, torch {torch.__version__}\n")
    rates: dict[str, list[float]] = {name: [] for name in loops}
    cadences: dict[str, list[float]] = {name: [] for name in loops}
    costs: dict[str, list[dict[str, float]]] = {name: [] for name in loops}
    ratios: dict[str, list[float]] = {name: [] for name in loops}
    profiles: dict[str, pstats.Stats] = {}
    for rep in range(opts.reps):
        order = loops[rep % len(loops):] + loops[:rep % len(loops)]  # interleaved, rotated
        for name in order:
            TICKS.clear()
            TICK_STEPS.clear()
            COST.clear()
            COST.update(hooks=0.0, worker=0.0, tail=0.0)
            PROFILE[:] = [cProfile.Profile()] if opts.profile else []
            rates[name].append(RUNNERS[name](bench, name, steps, None)[0])
            for profiler in PROFILE:
                if name in profiles:
                    profiles[name].add(profiler)
                else:
                    profiles[name] = pstats.Stats(profiler)
            PROFILE.clear()
            cadences[name].append(cadence())
            if opts.blocks:
                ratios[name].append(block_ratio())
            costs[name].append(dict(COST))
            print(f"rep {rep + 1} {name}: {rates[name][-1]:.1f} steps/s "
                  f"(cadence {cadences[name][-1]:.1f})", file=sys.stderr, flush=True)
    print("Mean rate over the timed steps (device synchronized at both ends):\n")
    print("\n".join(table(rates)))
    print("\nCadence: 1 / the median time between step ends (robust to hiccups):\n")
    print("\n".join(table(cadences)))
    if opts.blocks:
        print("\n".join(block_table(ratios, opts.blocks)))
    print("\n".join(cost_table(costs, steps)))
    for name, stats in profiles.items():
        print("\n".join(profile_table(name, stats, opts.profile, opts.reps * steps)))
    BLOCKS[0] = 0
    print(f"\n| loop | NaN at step {opts.nan_at}: last step run | step reported |\n|---|---|---|")
    for name in loops:
        _, last, reported = RUNNERS[name](bench, name, opts.nan_at + 5 - opts.warmup,
                                          opts.nan_at)
        print(f"| {name} | {last} | {reported if reported is not None else '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
