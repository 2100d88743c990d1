"""Two ranks on the CPU (torch.distributed, gloo): the HF Trainer under torchrun and
Lightning's `strategy="ddp"`. A NaN that only rank 1 sees stops every rank at the same
step, the reports are written once, nothing hangs (each run has a timeout), and on a
passing step the gate adds no collective (counted by wrappers in the child,
tests/integrations/ddp_child.py).

Mirrors transformers 5.25 (`Trainer._maybe_log_save_evaluate` all-gathers the loss) and
lightning 2.6 (`strategy="ddp"` re-runs the script for rank 1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
CHILD = Path(__file__).with_name("ddp_child.py")
ROOT = Path(__file__).resolve().parents[2]
NAN_AT = 6


def run(tmp: Path, framework: str, mode: str, steps: int = 12) -> list[dict[str, Any]]:
    out = tmp / f"{framework}-{mode}"
    out.mkdir()
    (out / "policy.yaml").write_text(
        "version: 1\nname: ddp\nrules:\n"
        f"  - id: loss-finite\n    metric: {'train/loss' if framework == 'hf' else 'train_loss'}\n"
        "    check: {finite: true}\n")
    args = [str(CHILD), framework, str(out), mode, str(NAN_AT), str(steps)]
    if framework == "hf":
        args = ["-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--standalone", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    # its own session: on a hang the whole group (torchrun and both ranks) is killed, so
    # no rank outlives the test holding its port and a core
    proc = subprocess.Popen([sys.executable, *args], cwd=out, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=300)  # a hang fails here
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"{framework}/{mode}: no exit within 300 s (a hang); {err[-4000:]}")
    assert proc.returncode == 0, err[-4000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    ranks.append({"reports": sorted(p.name for p in out.glob("gate-*.json")), "out": out})
    return ranks


def deltas(counts: list[int]) -> list[int]:
    return [b - a for a, b in zip([0, *counts[:-1]], counts, strict=True)]


# HF under torchrun on gloo hangs or aborts now and then on a 2-core CI machine *without*
# the gate (the plain "none" run: one rank left waiting, or SIGABRT at interpreter exit),
# 3 times in ~15 runs here; torch elastic starts its ranks in their own sessions, so a
# hang also outlives the group kill. Until that is isolated it does not run in CI; the
# Lightning variant (the rank agreement through the store) and the sync test do.
HF_FLAKY = "HF + torchrun + gloo hangs without the gate on a 2-core machine (see the note)"


@pytest.mark.parametrize("framework", [
    pytest.param("hf", marks=pytest.mark.skip(reason=HF_FLAKY)), "lightning"])
def test_one_rank_nan_stops_every_rank_together_without_extra_collectives(
    tmp_path: Path, framework: str
) -> None:
    # HF logs at on_step_end's count of step N+1 what step N gathered; Lightning's
    # boundaries are its logger steps (0-based): the last step run is NAN_AT + 1.
    last_async = NAN_AT + 1
    plain = run(tmp_path, framework, "none")
    gated = run(tmp_path, framework, "async")
    assert [r["last_step"] for r in gated[:2]] == [last_async, last_async]
    # one report, by the rank whose gate failed (HF: every rank judges the gathered
    # loss, so rank 0 writes; Lightning: only rank 1 saw the NaN, so rank 1 writes)
    writer = "gate-0.json" if framework == "hf" else "gate-1.json"
    assert gated[2]["reports"] == [writer]
    report = json.loads((gated[2]["out"] / writer).read_text())
    assert report["stopped"]["step"] == NAN_AT and report["status"] == "error"
    for r in (0, 1):  # the same collectives at every step the gated run ran
        steps = len(gated[r]["collectives"])
        assert deltas(gated[r]["collectives"]) == deltas(plain[r]["collectives"])[:steps]
    assert plain[0]["last_step"] == (12 if framework == "hf" else 11)  # nobody stopped


def test_sync_mode_stops_at_the_step_at_one_all_reduce_a_step(tmp_path: Path) -> None:
    """Lightning, mode="sync": ranks judging their own values agree at every step with
    `strategy.reduce_boolean_decision` (Lightning's `_sync_ddp`: a barrier, then an
    all-reduce): the documented price of stopping at the very step."""
    plain = run(tmp_path, "lightning", "none")
    gated = run(tmp_path, "lightning", "sync")
    assert [r["last_step"] for r in gated[:2]] == [NAN_AT, NAN_AT]
    assert gated[2]["reports"] == ["gate-1.json"]
    steps = len(gated[0]["collectives"])
    extra = [g - p for g, p in zip(deltas(gated[0]["collectives"]),
                                   deltas(plain[0]["collectives"])[:steps], strict=True)]
    # the probe counts at a step's end before the gate agrees: one step late
    assert extra == [0] + [2] * (steps - 1)
