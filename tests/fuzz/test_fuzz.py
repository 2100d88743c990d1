"""Seeded fuzzing of every reader: JSONL records, policies, expressions, .wandb logs.

Each test runs a few hundred generated cases in-process (see harness.py for what every
case must satisfy); `GATEKEEPER_FUZZ_SCALE=10` runs ten times as many, and
`GATEKEEPER_FUZZ_SEED=N` starts the seeds at N (cases CI has not run).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.expr import ExprError, parse_expr
from tests.fuzz import gen
from tests.fuzz.harness import check_outcome, run_cli, scaled, seeds

POLICY = """version: 1
name: fuzz
rules:
  - id: loss-bounded
    metric: loss
    steps: last
    check: {max: 100}
  - id: train-loss
    metric: train/loss
    check: {finite: true}
"""

RUN_ROWS = "".join(
    f'{{"step": {i}, "loss": {0.5 / (i + 1)}, "kl": 0.01, "eval/acc@1": 0.7}}\n' for i in range(8)
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "policy.yaml").write_text(POLICY)
    (root / "run.jsonl").write_text(RUN_ROWS)
    return root


def _check_jsonl(workdir: Path, case: gen.Case) -> None:
    path = workdir / f"{case.name}.jsonl"
    path.write_bytes(case.data)
    rc, _, err, seconds = run_cli(["check", str(path), "-p", str(workdir / "policy.yaml"), "-q"])
    check_outcome(case, path, rc, err, seconds)
    path.unlink()


def test_jsonl_labelled_cases(workdir: Path) -> None:
    judged = refused = 0
    for seed in seeds(300):
        case = gen.jsonl_case(seed)
        _check_jsonl(workdir, case)
        judged += case.bad_lines is None
        refused += case.bad_lines is not None
    assert judged > 50 and refused > 50  # the generator exercises both outcomes


def test_jsonl_byte_mutants(workdir: Path) -> None:
    for seed in seeds(200):
        _check_jsonl(workdir, gen.jsonl_mutant(seed))


def _check_policy(workdir: Path, case: gen.Case) -> None:
    path = workdir / f"{case.name}.yaml"
    path.write_bytes(case.data)
    rc, out, err, seconds = run_cli(["check", str(workdir / "run.jsonl"), "-p", str(path), "-q"])
    check_outcome(case, path, rc, err, seconds, out)
    path.unlink()


def test_policy_labelled_cases(workdir: Path) -> None:
    for seed in seeds(150):
        _check_policy(workdir, gen.policy_case(seed))


def test_policy_byte_mutants(workdir: Path) -> None:
    for seed in seeds(100):
        _check_policy(workdir, gen.policy_mutant(seed))


def test_expressions_parse_or_say_why() -> None:
    """Random token soup: an Expr or an ExprError, nothing else; valid ones evaluate."""
    for seed in seeds(3000):
        text = gen.expr_text(seed)
        try:
            parse_expr(text)
        except ExprError:
            pass
    rng = random.Random(1)
    inputs = {
        "loss": np.array([0.5, 2.0]),
        "kl": np.array([0.0, 1.0]),
        "eval/acc@1": np.array([0.7, 0.8]),
    }
    for _ in range(scaled(1000)):
        expr = parse_expr(f"loss + ({gen.valid_expr(rng)})")  # reads at least one metric
        assert expr.evaluate({m: inputs[m] for m in expr.metrics}).shape == (2,)


def _check_wandb(workdir: Path, case: gen.Case) -> None:
    run_dir = workdir / f"run-{case.name}"
    run_dir.mkdir()
    path = run_dir / f"{case.name}.wandb"
    path.write_bytes(case.data)
    rc, _, err, seconds = run_cli(["check", str(path), "-p", str(workdir / "policy.yaml"), "-q"])
    check_outcome(case, path, rc, err, seconds)


def test_wandb_labelled_cases(workdir: Path) -> None:
    pytest.importorskip("wandb")
    from tests.fuzz.wandb_gen import wandb_case

    for seed in seeds(80):
        _check_wandb(workdir, wandb_case(seed)[0])


def test_wandb_mutants(workdir: Path) -> None:
    pytest.importorskip("wandb")
    from tests.fuzz.wandb_gen import wandb_mutant

    for seed in seeds(120):
        _check_wandb(workdir, wandb_mutant(seed))
