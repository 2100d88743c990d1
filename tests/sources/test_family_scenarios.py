"""Every source family, the same scenarios, one verdict whole and poll by poll (issue 26).

Each case writes its run with the family's real library in child processes
(tests/sources/family_writer.py: plain JSONL lines as miles/HF recorders write them, the
wandb SDK 0.31 offline, torch 2.13's `SummaryWriter`, mlflow 3.17's client on a file
store), the last process as CMD of `gatekeeper run --source SPEC -- CMD` (followed poll by
poll), then `gatekeeper check` of the run it wrote (through the CLI's entry point in this
process, `check_in_process`; the run and every writer are child processes, as a user
runs them). Both verdicts — exit code and every
rule that did not pass, with its status and step — must equal the scenario's expected
one, stated in SCENARIOS, so the two cannot agree on a wrong answer.

Prometheus (Debian's 2.42 server scraping a prometheus_client exporter) has the
non-finite scenario only (test_prometheus_non_finite_whole_and_live): a run, a resume and
an epoch axis do not exist in it. Its steps are sample indices, so where the NaN lands
depends on scrape timing: there the step must be the same in both, the rest is stated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon.harness import free_port
from tests.helpers import gatekeeper, gatekeeper_in_process, wait_ready, write_policy
from tests.wandb.conftest import sdk_env

pytest.importorskip("torch.utils.tensorboard")
pytest.importorskip("mlflow")
pytest.importorskip("wandb")
WRITER = str(Path(__file__).with_name("family_writer.py"))
FAST = ("--interval", "0.1", "--progress-every", "1", "--grace", "5")
LOSS = """
version: 1
name: fam
rules:
  - id: loss-bounded
    metric: train/loss
    check: {max: 2.0}
"""
VAL_LAST = """
  - id: val-last
    metric: val/loss
    steps: last
    check: {max: 2.0}
"""
Verdict = tuple[int, list[tuple[str, str, int | None]]]


@dataclass(frozen=True)
class Scenario:
    """`first` (written to completion before the watch begins) then `cmd` (CMD of `run`);
    `resume`: `cmd` continues `first`'s run, else it is a new run next to it."""

    name: str
    first: tuple[str, ...] | None
    cmd: tuple[str, ...]
    expected: Verdict
    resume: bool = False
    policy: str = LOSS


SCENARIOS = [
    # an older run, broken at step 3, where the new one is written (broken at step 7):
    # only the new run is judged, and the step says which was
    Scenario("later-run", ("--stop", "10", "--bad-at", "3"), ("--stop", "30", "--bad-at", "7"),
             (1, [("loss-bounded", "fail", 7)])),
    # 0..69 healthy, then resumed from a checkpoint at 40..64 (all below the old max 69),
    # a bad point at 55
    Scenario("resumed", ("--stop", "70",), ("--start", "40", "--stop", "65", "--bad-at", "55"),
             (1, [("loss-bounded", "fail", 55)]), resume=True),
    # NaN at 5, +Inf at 6, -Inf at 7: an ERROR at the first non-finite step
    Scenario("non-finite", None, ("--stop", "20", "--nonfinite-at", "5"),
             (1, [("loss-bounded", "error", 5)])),
    # loss per step 0..99, val/loss per epoch at steps 0..9 (same axis; wandb: its declared
    # `epoch` axis): a healthy run
    Scenario("per-epoch", None, ("--stop", "100", "--epochs-of", "10"), (0, []),
             policy=LOSS + VAL_LAST),
]


class Family:
    """Where a family's runs go, what `run --source` and `check` are given, its env."""

    name = ""

    def __init__(self, tmp: Path):
        self.tmp = tmp

    def target(self, index: int) -> str:
        """The writer's TARGET for run `index` (0: the older run, 1: CMD's)."""
        raise NotImplementedError

    def source(self, sc: Scenario) -> str:
        raise NotImplementedError

    def check_spec(self, sc: Scenario) -> str:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None

    def run_id(self) -> str | None:
        return None


class Jsonl(Family):
    """An older run is the record file a re-run truncates (as an HF/miles recorder
    reopening its path does); a resumed run appends to it."""

    name = "jsonl"

    def target(self, index: int) -> str:
        return str(self.tmp / "out" / "metrics.jsonl")

    def source(self, sc: Scenario) -> str:
        return self.target(1)

    check_spec = source


class Wandb(Family):
    """Runs under WANDB_DIR/wandb; the watch is given the folder holding `wandb/`."""

    name = "wandb"

    def target(self, index: int) -> str:
        return str(self.tmp / "work")

    def source(self, sc: Scenario) -> str:
        return self.target(1)

    def check_spec(self, sc: Scenario) -> str:
        return str(sorted((self.tmp / "work" / "wandb").glob("offline-run-*"))[-1])

    def env(self) -> dict[str, str]:
        return sdk_env(self.tmp / "work")

    def run_id(self) -> str:
        return "famresume01"  # given to both processes: wandb resumes by id


class Tensorboard(Family):
    """A log dir of runs `version_N` (older: version_0); a resume writes its run dir again."""

    name = "tensorboard"

    def target(self, index: int) -> str:
        return str(self.tmp / "logs" / f"version_{index}")

    def source(self, sc: Scenario) -> str:
        return self.target(0) if sc.resume else str(self.tmp / "logs")

    def check_spec(self, sc: Scenario) -> str:
        return self.target(0 if sc.resume else 1)


class Mlflow(Family):
    """A file store; CMD creates its run (its id written to a file) or resumes one."""

    name = "mlflow"

    def uri(self) -> str:
        return f"file://{self.tmp / 'mlruns'}"

    def target(self, index: int) -> str:
        return self.uri()

    def source(self, sc: Scenario) -> str:
        return self.check_spec(sc) if sc.resume else f"mlflow+{self.uri()}"

    def check_spec(self, sc: Scenario) -> str:
        return f"mlflow+{self.uri()}/runs/{self.run_id()}"

    def env(self) -> dict[str, str]:
        return {"MLFLOW_ALLOW_FILE_STORE": "true"}

    def run_id(self) -> str:
        return (self.tmp / "run_id").read_text()


FAMILIES = [Jsonl, Wandb, Tensorboard, Mlflow]


def _write(fam: Family, index: int, args: list[str]) -> list[str]:
    """The writer's command line for run `index` of `fam`."""
    return [sys.executable, WRITER, fam.name, fam.target(index), "--delay", "0.005", *args,
            "--id-file", str(fam.tmp / "run_id")]


def _verdict(proc: subprocess.CompletedProcess[str], out: Path) -> Verdict:
    """The exit code and every rule that did not pass. `run-state` is left out: `run`
    stops CMD at a failure, and `check` then rightly finds that MLflow run not ended."""
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    return proc.returncode, [(r["rule"], r["status"], r.get("step")) for r in results
                             if r["status"] != "pass" and r["rule"] != "run-state"]


def _case(family: type[Family], sc: Scenario, tmp: Path) -> tuple[Verdict, Verdict]:
    """`run` with the scenario's CMD (after its first run), then `check` of what it wrote."""
    fam = family(tmp)
    env = {**(fam.env() or {}), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    policy = write_policy(tmp / "policy.yaml", sc.policy)
    cmd = list(sc.cmd)
    if sc.first is not None:
        first = [*sc.first, *(["--resume", fam.run_id()] if sc.resume and fam.name == "wandb"
                              else [])]
        subprocess.run(_write(fam, 0, first), env={**os.environ, **env}, cwd=tmp, check=True,
                       capture_output=True, timeout=120)
        if sc.resume:  # the id of the run to continue (JSONL, TensorBoard: its path)
            cmd += ["--resume", fam.run_id() or "same-path"]
        if fam.name == "wandb":  # a segment's directory name carries its start second
            time.sleep(1.1)
    live, whole = tmp / "run.json", tmp / "check.json"
    proc = gatekeeper(
        "run", "-p", str(policy), "--source", fam.source(sc), "--json", str(live), *FAST,
        "--", *_write(fam, 0 if sc.resume else 1, cmd), env=env, cwd=tmp, timeout=180,
    )
    by_run = _verdict(proc, live)
    proc = check_in_process(fam.check_spec(sc), "-p", str(policy), "--json", str(whole),
                            env=fam.env())
    return by_run, _verdict(proc, whole)


def check_in_process(*args: str, env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """`gatekeeper check ARGS` in this process (tests.helpers.gatekeeper_in_process)."""
    return gatekeeper_in_process("check", *args, env=env)


# the known false verdicts of main, each (scenario, family): reason
KNOWN: dict[tuple[str, str], str] = {}


def _cases() -> list:
    cases = []
    for sc in SCENARIOS:
        for family in FAMILIES:
            marks = []
            if (sc.name, family.name) in KNOWN:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[sc.name, family.name]))
            cases.append(pytest.param(family, sc, marks=marks, id=f"{sc.name}-{family.name}"))
    return cases


@pytest.mark.parametrize(("family", "sc"), _cases())
def test_check_and_run_give_the_scenarios_verdict(
    family: type[Family], sc: Scenario, tmp_path: Path
) -> None:
    by_run, by_check = _case(family, sc, tmp_path)
    assert by_check == sc.expected, ("check", by_check)
    assert by_run == sc.expected, ("run", by_run)


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus: apt-get install "
                    "-y prometheus")
def test_prometheus_non_finite_whole_and_live(tmp_path: Path) -> None:
    """`run` of an exporter that goes NaN, +Inf, -Inf, then `check` of the same window."""
    sc = next(s for s in SCENARIOS if s.name == "non-finite")
    exporter, port = free_port(), free_port()
    config = {"scrape_configs": [{"job_name": "trainer", "scrape_interval": "200ms",
                                  "static_configs": [{"targets": [f"127.0.0.1:{exporter}"]}]}]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    server = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}/-/ready", server, 60, "prometheus did not start")
        spec = f'prom+http://127.0.0.1:{port}?selector={{job="trainer"}}&start={time.time():.0f}'
        policy = write_policy(tmp_path / "p.yaml", sc.policy.replace("train/loss", "train_loss"))
        verdicts = []
        for command, args in (("run", ("--json", str(tmp_path / "run.json"), *FAST, "--",
                                       sys.executable, WRITER, "prometheus", str(exporter),
                                       "--delay", "0.4", *sc.cmd)),
                              ("check", ("--json", str(tmp_path / "check.json")))):
            proc = gatekeeper(command, *((spec,) if command == "check" else ("--source", spec)),
                              "-p", str(policy), *args)
            verdicts.append(_verdict(proc, tmp_path / f"{command}.json"))
    finally:
        server.terminate()
        server.wait(10)
    (code, [(rule, status, step)]), by_check = verdicts
    assert (code, rule, status) == (1, "loss-bounded", "error") and isinstance(step, int)
    assert by_check == verdicts[0]  # the same sample, whole and poll by poll
