"""Seeded fuzzing of the MLflow file store: a run written by the real mlflow client, damaged
one way per seed (tests/fuzz/mlflow_gen.py), judged by `check` in-process — and every 8th
case followed by `watch` too. Each case must give its labelled answer: never exit 70, never
a hang (a FIFO is refused, not opened), never a pass on a value that was not read — a
damaged file is exit 2 with one line naming it (and the line of a metric file).

`GATEKEEPER_FUZZ_SCALE` / `GATEKEEPER_FUZZ_SEED` scale and move the seeds as for the rest.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.harness import TIME_BOUND, run_cli, seeds
from tests.fuzz.mlflow_gen import Expect, mlflow_case

pytest.importorskip("mlflow")

POLICY = """version: 1
name: fuzz
rules:
  - id: loss-bounded
    metric: train/loss
    check: {max: 2.0}
"""


class Hung(BaseException):
    """The CLI was still running at TIME_BOUND: a read that blocks (a FIFO) or never ends."""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """(store, experiment id, run id): losses 1.0, 0.5, 0.25, param lr, tag team, FINISHED."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    saved = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    root = tmp_path_factory.mktemp("mlflow-fuzz") / "mlruns"
    client = MlflowClient(f"file://{root}")
    exp = client.create_experiment("fuzz")
    rid = client.create_run(exp, tags={"team": "rl"}).info.run_id
    client.log_batch(rid, metrics=[Metric("train/loss", v, 1000 + i, i)
                                   for i, v in enumerate([1.0, 0.5, 0.25])],
                     params=[Param("lr", "0.1")])
    client.set_terminated(rid, "FINISHED")
    (root.parent / "policy.yaml").write_text(POLICY)
    yield root, exp, rid
    if saved is None:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def _bounded_cli(argv: list[str]) -> tuple[int, str]:
    def alarm(_sig: int, _frame: object) -> None:
        raise Hung

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_BOUND)
    try:
        rc, _, err, _ = run_cli(argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert "Hung" not in err, f"still reading after {TIME_BOUND} s: {err}"
    return rc, err


def _check(expect: Expect, run: Path, rc: int, err: str, command: str) -> None:
    where = f"{expect.name} {command} ({run})"
    assert rc in (0, 1, 2), f"{where}: exit {rc}: {err}"
    if expect.rc is not None:
        assert rc == expect.rc, f"{where}: exit {rc}, expected {expect.rc}: {err}"
    if rc != 2:
        return
    error = err.strip().splitlines()[-1]
    assert error.startswith("gatekeeper: error: "), f"{where}: {err!r}"
    assert err.count("gatekeeper: error:") == 1, f"{where}: not one error line: {err!r}"
    named = run / expect.file if expect.file else run
    assert str(named) in error, f"{where}: error does not name {named}: {error}"
    if expect.lines:
        assert any(f"{named}:{n}: " in error for n in expect.lines), (
            f"{where}: names none of lines {sorted(expect.lines)}: {error}"
        )


def test_damaged_file_stores(template: tuple[Path, str, str], tmp_path: Path) -> None:
    root, exp, rid = template
    policy = str(root.parent / "policy.yaml")
    outcomes: dict[int, int] = {}
    for seed in seeds(160):
        store = tmp_path / f"s{seed}" / "mlruns"
        shutil.copytree(root, store, symlinks=True)
        run = store / exp / rid
        expect = mlflow_case(seed, run)
        source = f"mlflow+file://{store}/runs/{rid}"
        rc, err = _bounded_cli(["check", source, "-p", policy, "-q"])
        _check(expect, run, rc, err, "check")
        outcomes[rc] = outcomes.get(rc, 0) + 1
        if seed % 8 == 0:
            rc, err = _bounded_cli(["watch", source, "-p", policy, "-q", "--interval", "0.05",
                                    "--idle-timeout", "2"])  # a RUNNING run: ends
            _check(expect, run, rc, err, "watch")
        shutil.rmtree(store.parent)
    if len(seeds(160)) >= 160:  # the generator reaches every outcome
        assert outcomes.get(0, 0) > 10 and outcomes.get(1, 0) > 10 and outcomes.get(2, 0) > 40
