"""The training thread's share of the in-process gate: the time one call takes on the
caller's thread, `observe` (judges there) vs `feed` in mode sync and async (hands over:
the values sent down the judge process's pipe, the previous step's answer read), 14
metrics as host tensors, the 20-rule bench/inprocess_policy.yaml, 400 steps of 10 ms
each (the first 20 dropped); "failing": values that fail two rules from the first step on
(the gate failed, the loop goes on, as under on_fail="report"). Run from the repository
root."""

from __future__ import annotations

import statistics
import time

import torch

from gatekeeper.inprocess import Gate

NAMES = ("loss", "grad_norm", "learning_rate", "ppl", "loss_ema", "grad_norm_ema",
         "loss_delta", "wte_norm", "wpe_norm", "ln_f_norm", "tokens", "clip_ratio",
         "update_scale", "epoch")


def run(kind: str) -> tuple[float, float]:
    """Median and p99 milliseconds of one call on the training thread."""
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
    for kind in ("observe", "sync", "async", "async failing", "observe", "async",
                 "async failing"):
        median, p99 = run(kind)
        print(f"{kind}: median {median:.3f} ms, p99 {p99:.3f} ms")
