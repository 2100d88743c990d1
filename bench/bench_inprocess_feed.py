"""The training thread's share of the in-process gate: the time one call takes on the
caller's thread, `observe` (judges there) vs `feed` in mode sync and async (hands over:
the values sent down the judge process's pipe, the previous step's answer read), 14
metrics as host tensors, the 20-rule bench/inprocess_policy.yaml, 400 steps of 10 ms
each (the first 20 dropped); "failing": values that fail two rules from the first step on
(the gate failed, the loop goes on, as under on_fail="report"); "hf hooks": the HF
callback's hooks as the Trainer calls them each step (`on_pre_optimizer_step` 3 ms into
the step, `on_step_end` and `on_log` after the rest of it), the logs as floats (what
the Trainer logs after its `.item()`), real transformers objects, their time summed.
Run from the repository root."""

from __future__ import annotations

import statistics
import time

import torch

from gatekeeper.inprocess import Gate

NAMES = ("loss", "grad_norm", "learning_rate", "ppl", "loss_ema", "grad_norm_ema",
         "loss_delta", "wte_norm", "wpe_norm", "ln_f_norm", "tokens", "clip_ratio",
         "update_scale", "epoch")


def hf_hooks(steps: int = 400) -> list[float]:
    """Seconds of the HF callback's hooks on the training thread, per step."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from gatekeeper.integrations.hf import GatekeeperCallback

    cb = GatekeeperCallback("bench/inprocess_policy.yaml", echo=False)
    args = TrainingArguments(output_dir="/tmp/bench-inprocess-feed", logging_steps=1,
                             report_to=[], logging_nan_inf_filter=False)
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control, model=None)
    took = []
    for step in range(1, steps + 1):
        state.global_step = step
        logs = {n: 0.5 + 0.01 * (step % 7) for n in NAMES}  # WandbCallback's train/ names
        time.sleep(0.003)  # forward and backward queued
        start = time.perf_counter()
        cb.on_pre_optimizer_step(args, state, control)
        early = time.perf_counter() - start
        time.sleep(0.007)  # the rest of the step, then the Trainer's `.item()`
        start = time.perf_counter()
        control.should_log = True  # DefaultFlowCallback's, before this callback's
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs=logs)
        took.append(early + time.perf_counter() - start)
    cb.on_train_end(args, state, control)
    return took


def run(kind: str) -> tuple[float, float]:
    """Median and p99 milliseconds of one call (hf hooks: one step's hooks) on the
    training thread."""
    if kind == "hf hooks":
        took = sorted(hf_hooks()[20:])
        return statistics.median(took) * 1e3, took[int(len(took) * 0.99)] * 1e3
    gate = Gate("bench/inprocess_policy.yaml", echo=False, axis="train/global_step",
                mode="sync" if kind == "sync" else "async")
    base = 1.0 if kind.endswith("failing") else 0.5  # learning_rate, clip_ratio: at most 1
    took = []
    for step in range(1, 401):
        metrics = {f"train/{n}": torch.tensor(base + 0.01 * (step % 7)) for n in NAMES}
        time.sleep(0.01)  # the training step
        start = time.perf_counter()
        if kind.startswith("observe"):
            gate.observe(step, metrics)
        else:
            gate.feed(step, metrics)
        took.append(time.perf_counter() - start)
    gate.finalize(write=False)
    took = sorted(took[20:])
    return statistics.median(took) * 1e3, took[int(len(took) * 0.99)] * 1e3


if __name__ == "__main__":
    torch.set_num_threads(1)
    for kind in ("observe", "sync", "async", "async failing", "hf hooks", "observe", "async",
                 "async failing", "hf hooks"):
        median, p99 = run(kind)
        print(f"{kind}: median {median:.3f} ms, p99 {p99:.3f} ms")
