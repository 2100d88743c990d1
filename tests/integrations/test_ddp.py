"""Two ranks on the CPU (torch.distributed, gloo): the HF Trainer and Lightning's
`strategy="ddp"`. A NaN that only rank 1 sees stops every rank at the same step, the
reports are written once, nothing hangs (a hard timeout kills both ranks), and on a
passing step the gate adds no collective (counted by wrappers in the child,
tests/integrations/ddp_child.py).

The test starts both ranks itself, with the environment torchrun gives its workers (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), which the HF Trainer (through accelerate) and
Lightning (`LOCAL_RANK` set: it starts no process of its own) read. No elastic agent: the
agent starts each worker in a session of its own (so it can signal each worker's process
group), and a worker then outlives a kill of the agent's group. Here each rank has its
own session too, is killed by its group on a timeout or when the other rank fails, and
asks the kernel to kill it when this process dies (`PR_SET_PDEATHSIG`). The rendezvous
store is hosted by this process on a port the kernel picks: no port to race for. Output
goes to files (OUT/rank-R.log), never pipes.

Each rank runs its framework's trainings one after another in one process group (no
gate, then the gated ones): one start-up per framework, and what a second `fit()` in the
same group does is covered too.

Mirrors transformers 5.25 (`Trainer._maybe_log_save_evaluate` all-gathers the loss) and
lightning 2.6 (`LightningEnvironment.creates_processes_externally`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch.distributed")
CHILD = Path(__file__).with_name("ddp_child.py")
ROOT = Path(__file__).resolve().parents[2]
NAN_AT = 6
STEPS = 10
TIMEOUT_S = 240  # both ranks of one framework, every run; ~30 s on an idle 2-core machine
METRIC = {"hf": "train/loss", "lightning": "train_loss"}


def rank_env(rank: int, port: int) -> dict[str, str]:
    return {
        **os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false", "DDP_TEST_PARENT": str(os.getpid()),
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        # every rank is a client of the store this process hosts (torchrun's agent does so)
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


def kill(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill each rank still running with its process group (its own session)."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_all(procs: Sequence[subprocess.Popen[bytes]], deadline: float) -> str | None:
    """None when every rank exited 0; else why not (a rank failed, or the deadline)."""
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in procs]
        if any(code not in (None, 0) for code in codes):
            return f"exit codes {codes}"
        if all(code == 0 for code in codes):
            return None
        time.sleep(0.2)
    return f"no exit within {TIMEOUT_S} s (a hang)"


Runs = list[list[dict[str, Any]]]  # per run: rank 0's, rank 1's results, the reports


def launch(out: Path, framework: str, modes: Sequence[str]) -> Runs:
    """Both ranks of `framework`, each running `modes` in turn: per run, rank 0's and
    rank 1's results and the gate reports written."""
    from torch.distributed import TCPStore

    out.mkdir()
    (out / "policy.yaml").write_text(
        "version: 1\nname: ddp\nrules:\n"
        f"  - id: loss-finite\n    metric: {METRIC[framework]}\n    check: {{finite: true}}\n")
    store = TCPStore("127.0.0.1", 0, 2, True, wait_for_workers=False)
    args = [sys.executable, str(CHILD), framework, str(out), str(NAN_AT), str(STEPS), *modes]
    procs = []
    try:
        for rank in (0, 1):
            with (out / f"rank-{rank}.log").open("wb") as log:
                procs.append(subprocess.Popen(
                    args, cwd=out, env=rank_env(rank, store.port), stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        failed = wait_all(procs, time.monotonic() + TIMEOUT_S)
    finally:
        kill(procs)
        del store
    if failed:
        logs = "\n".join(f"--- rank {r}:\n" + (out / f"rank-{r}.log").read_text()[-3000:]
                         for r in (0, 1))
        pytest.fail(f"{framework}: {failed}\n{logs}")
    ranks = [json.loads((out / f"rank-{r}.json").read_text())["runs"] for r in (0, 1)]
    dirs = [out / f"{i}-{mode}" for i, mode in enumerate(modes)]
    return [[ranks[0][i], ranks[1][i],
             {"reports": sorted(p.name for p in run.glob("gate-*.json")), "out": run}]
            for i, run in enumerate(dirs)]


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    pytest.importorskip("transformers")
    return launch(tmp_path_factory.mktemp("ddp") / "hf", "hf", ["none", "async"])


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The gated async run twice: the second fit in the process group must not take the
    first one's stop for its own."""
    pytest.importorskip("lightning")
    return launch(tmp_path_factory.mktemp("ddp") / "lightning", "lightning",
                  ["none", "async", "sync", "async"])


def deltas(counts: list[int]) -> list[int]:
    return [b - a for a, b in zip([0, *counts[:-1]], counts, strict=True)]


@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_one_rank_nan_stops_every_rank_together_without_extra_collectives(
    request: pytest.FixtureRequest, framework: str
) -> None:
    runs = request.getfixturevalue(f"{framework}_runs")
    plain = runs[0]
    for gated in runs[1::2]:  # HF: the one async run; Lightning: both
        assert_stopped_together(framework, plain, gated)
    # nobody stopped the plain run, and it ran collectives of its own every step
    assert [r["last_step"] for r in plain[:2]] == [STEPS if framework == "hf" else STEPS - 1] * 2
    assert min(deltas(plain[0]["collectives"])[1:]) >= 1
    assert plain[2]["reports"] == []


def assert_stopped_together(framework: str, plain: list[dict[str, Any]],
                            gated: list[dict[str, Any]]) -> None:
    # HF logs at on_step_end's count of step N+1 what step N gathered; Lightning's
    # boundaries are its logger steps (0-based): either way the last step is NAN_AT + 1
    assert [r["last_step"] for r in gated[:2]] == [NAN_AT + 1, NAN_AT + 1]
    # one report, by the rank whose gate failed (HF: every rank judges the gathered
    # loss, so rank 0 writes; Lightning: only rank 1 saw the NaN, so rank 1 writes)
    writer = "gate-0.json" if framework == "hf" else "gate-1.json"
    assert gated[2]["reports"] == [writer]
    report = json.loads((gated[2]["out"] / writer).read_text())
    assert report["stopped"]["step"] == NAN_AT and report["status"] == "error"
    ran = NAN_AT + 1 if framework == "hf" else NAN_AT + 2  # steps (batches) run
    for r in (0, 1):  # the same collectives at every step the gated run ran
        assert len(gated[r]["collectives"]) == ran
        assert deltas(gated[r]["collectives"]) == deltas(plain[r]["collectives"])[:ran]


def test_sync_mode_stops_at_the_step_at_one_all_reduce_a_step(lightning_runs: Runs) -> None:
    """Lightning, mode="sync": ranks judging their own values agree at every step with
    `strategy.reduce_boolean_decision` (Lightning's `_sync_ddp`: a barrier, then an
    all-reduce): the documented price of stopping at the very step."""
    plain, gated = lightning_runs[0], lightning_runs[2]
    assert [r["last_step"] for r in gated[:2]] == [NAN_AT, NAN_AT]
    assert gated[2]["reports"] == ["gate-1.json"]
    steps = len(gated[0]["collectives"])
    extra = [g - p for g, p in zip(deltas(gated[0]["collectives"]),
                                   deltas(plain[0]["collectives"])[:steps], strict=True)]
    # the probe counts at a step's end before the gate agrees: one step late
    assert extra == [0] + [2] * (steps - 1)
