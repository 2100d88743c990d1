"""The CPU path of `bench/bench_inprocess_gpu.py` (issue 30: CI has no GPU, so the
bench's own loops run here on the CPU): the real HF Trainer and Lightning Trainer with
their callbacks, `Gate.feed` and an ungated loop, a NaN at step 12. The figures are the
GPU's to give; what the CPU run proves is that every loop runs and where each stops."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("lightning")


def test_the_bench_loops_run_on_the_cpu_and_stop_where_the_gate_says() -> None:
    out = subprocess.run(
        [sys.executable, "bench/bench_inprocess_gpu.py", "--quick", "--reps", "1", "--steps",
         "10", "--warmup", "5", "--nan-at", "12", "--loops", "plain,gate,hf+cb,pl+cb"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    stops = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1].isdigit():
            stops[cells[0]] = (int(cells[1]), cells[2])
    # async gates: step 12 judged while step 13 runs, the run stops after 13
    assert stops == {"plain": (17, "-"), "gate": (13, "12"), "hf+cb": (13, "12"),
                     "pl+cb": (13, "12")}, out
    assert "on_train_batch_start" in out  # the Lightning send is timed where it happens
