"""`gatekeeper suggest`: bands from healthy runs pass them, generalise to another healthy
run of the same recipe (real seeds of a real trainer), and fail broken runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import REPO, gatekeeper, gatekeeper_in_process
from tests.toolkit.runs import healthy_runs, reward_never_rises


def _noisy(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(0, 3, 100)  # spans orders of magnitude


def _only_some(seed: int) -> np.ndarray | None:
    return np.ones(100) if seed < 4 or seed == 6 else None


def test_bands_from_five_healthy_runs_pass_them_and_fail_broken_runs(tmp_path):
    runs = healthy_runs(tmp_path, extra={"train/noisy": _noisy, "train/sometimes": _only_some})
    policy = tmp_path / "policy.yaml"
    out = gatekeeper("suggest", *map(str, runs), "-o", str(policy), "--name", "bands")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "too noisy to band: train/noisy (every point)" in out.stdout
    assert "not banded: train/sometimes: not logged by healthy-4, healthy-5" in out.stdout
    text = policy.read_text()
    assert "id: train-noisy-range" not in text  # its other selections are judged on their own
    # every number says where it came from
    bounds = [line for line in text.splitlines() if re.match(r"\s+- -?[0-9.e+-]+", line)]
    assert bounds and all("#" in line and "runs" in line for line in bounds)
    assert all(f"healthy-{i} ({runs[i - 1]})" in text for i in range(1, 6))
    for run in runs:  # the written policy holds its inputs (the children below run it too)
        ok = gatekeeper_in_process("check", str(run), "-p", str(policy), "-q")
        assert ok.returncode == 0, ok.stdout
    broken = gatekeeper("check", str(REPO / "examples/runs/broken-kl"), "-p", str(policy), "-q")
    assert broken.returncode == 1 and "bands/train-ppo-kl-step0" in broken.stdout
    flat = gatekeeper("check", str(reward_never_rises(tmp_path)), "-p", str(policy))
    assert flat.returncode == 1 and "bands/rollout-raw-reward-late" in flat.stdout
    # a sixth healthy run, not among the inputs, passes too (the margins are not overfit)
    extra = {"train/noisy": _noisy, "train/sometimes": _only_some}
    (sixth_run,) = healthy_runs(tmp_path / "more", range(6, 7), extra)
    sixth = gatekeeper("check", str(sixth_run), "-p", str(policy), "-q")
    assert sixth.returncode == 0, sixth.stdout


def test_suggest_rejects_a_single_run_and_bad_quantiles(tmp_path):
    (run,) = healthy_runs(tmp_path, seeds=range(1, 2))
    out = gatekeeper("suggest", str(run), "-o", str(tmp_path / "p.yaml"))
    assert out.returncode == 2 and "at least 2 trusted runs" in out.stderr
    out = gatekeeper(
        "suggest", str(run), str(run), "-o", str(tmp_path / "p.yaml"), "--quantiles", "0.9,0.1"
    )
    assert out.returncode == 2 and "--quantiles" in out.stderr


def test_a_band_an_input_run_fails_is_dropped_not_written(tmp_path):
    from gatekeeper.sources import open_source
    from gatekeeper.toolkit.suggest import Band, Settings, Suggestion
    from gatekeeper.toolkit.suggest_check import write_verified

    paths = healthy_runs(tmp_path, seeds=range(1, 3))
    runs = [open_source(str(p)).read() for p in paths]
    sug = Suggestion(runs=[r.name for r in runs])
    sug.bands = [
        Band("loss-ok", "train/loss", "all", "all", None, 0.0, 1.0, "lo", "hi"),
        Band("loss-too-tight", "train/loss", "all", "all", None, 0.0, 0.3, "lo", "hi"),  # 0.4
    ]
    out = tmp_path / "p.yaml"
    write_verified(sug, runs, str(out), "t", [str(p) for p in paths], Settings())
    text = out.read_text()
    assert "id: loss-ok" in text and "id: loss-too-tight" not in text
    assert "# not banded: loss-too-tight: dropped, healthy-1 does not pass it" in text


# --- bands that generalise: real seeds of one recipe (transformers.Trainer on CPU) ---

SEEDS = (1, 2, 3, 4)
TIMING = ("train/train_runtime", "train/train_samples_per_second", "eval/runtime",
          "eval/steps_per_second", "train/epoch")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 healthy seeds and a diverged one (NaN from step 12), 24 steps each: one child."""
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("seeds")
    script = REPO / "tests" / "toolkit" / "seeded_trainer.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, str(script), str(out), "24", *map(str, SEEDS), "--broken", "9"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("held_out", SEEDS)
def test_bands_from_three_seeds_pass_the_fourth_and_fail_a_diverged_run(seeded, held_out):
    trusted = [str(seeded / f"seed-{s}.jsonl") for s in SEEDS if s != held_out]
    policy = seeded / f"without-{held_out}.yaml"
    out = gatekeeper("suggest", *trusted, "-o", str(policy))
    assert out.returncode == 0, out.stdout + out.stderr
    # the machine's speed is not the run's health: timing metrics are listed, not banded
    timing = next(line for line in out.stdout.splitlines() if "timing, left out" in line)
    assert all(name in timing for name in TIMING), timing
    text = policy.read_text()
    assert not any(f'metric: "{name}"' in text for name in TIMING)
    assert "id: train-grad-norm-step1" in text and "id: train-loss-step1" in text
    # each band says how sure it is, in the file and on the console
    assert text.count('description: "from 3 runs; leave-one-out: ') == text.count("  - id: ")
    assert "  train-loss-range: from 3 runs; leave-one-out: 3 of 3 held-out runs pass" in (
        out.stdout
    )
    fourth = gatekeeper("check", str(seeded / f"seed-{held_out}.jsonl"), "-p", str(policy), "-q")
    assert fourth.returncode == 0, fourth.stdout
    broken = gatekeeper("check", str(seeded / "nan-9.jsonl"), "-p", str(policy))
    assert broken.returncode == 1, broken.stdout
    assert "ERROR suggested/train-loss-range: " in broken.stdout  # NaN from step 12


def test_timing_metrics_are_banded_when_asked(seeded):
    trusted = [str(seeded / f"seed-{s}.jsonl") for s in SEEDS[:3]]
    policy = seeded / "timing.yaml"
    asked = ("--include-timing", "train/total_flos", "--include-timing", "train/train_run*")
    out = gatekeeper("suggest", *trusted, "-o", str(policy), *asked)
    assert out.returncode == 0, out.stderr
    text = policy.read_text()
    assert 'metric: "train/total_flos"' in text  # the same in every seed: a tight band
    # asked for, the wall time is judged like any metric (banded, or too noisy to band,
    # as this machine's load has it); the ones not asked for are still left out
    timing = next(line for line in out.stdout.splitlines() if "timing, left out" in line)
    assert "train/train_runtime" not in timing and "eval/runtime" in timing
    assert ('metric: "train/train_runtime"' in text) != (
        "too noisy to band: train/train_runtime (every point)" in out.stdout
    )
    assert 'metric: "eval/runtime"' not in text


def test_prediction_factor_is_students_t_and_widens_with_fewer_runs():
    from gatekeeper.toolkit.suggest import predict_factor, t_quantile

    # two-sided 99% points of Student's t (any table): df 1, 2, 4, 9, 29
    for df, t in ((1, 63.657), (2, 9.925), (4, 4.604), (9, 3.250), (29, 2.756)):
        assert abs(t_quantile(0.99, df) - t) < 1e-3
    assert abs(t_quantile(0.95, 3) - 3.182) < 1e-3
    factors = [predict_factor(n, 0.99) for n in (2, 3, 5, 10, 30)]
    assert factors == sorted(factors, reverse=True) and factors[-1] > 2.576  # above normal's


def _shifted(seed: int) -> np.ndarray:
    """Every run agrees to 0.1% but run 20, 10% higher: bands from the others cannot hold it."""
    level = 1.1 if seed == 20 else 1.0
    return level + np.random.default_rng(seed).normal(0, 0.001, 100)


def _said(stdout: str, rule: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith(f"  {rule}: "))


def test_a_band_a_held_out_run_fails_is_widened_to_hold_it_and_says_so(tmp_path):
    runs = healthy_runs(tmp_path, range(1, 21), extra={"train/shifted": _shifted})
    policy = tmp_path / "p.yaml"
    out = gatekeeper("suggest", *map(str, runs), "-o", str(policy))
    assert out.returncode == 0, out.stderr
    for kind in ("step0", "range", "late"):
        said = _said(out.stdout, f"train-shifted-{kind}")
        assert "19 of 20 held-out runs pass; failed by healthy-20 (0.1" in said or (
            "failed by healthy-20 (0.09" in said
        ), said
        assert re.search(r"widened to 0\.[89]\d*\.\.1\.1\d* \(1.25 x that far\)", said), said
    assert "train-loss-range: from 20 runs; leave-one-out: 20 of 20 held-out runs pass" in (
        out.stdout
    )
    text = policy.read_text()
    assert "# leave-one-out: train-shifted-late: widened to 0." in text
    assert text.count("failed by healthy-20") == 3 + 3  # header and description per rule
    for run in runs:  # in this process: 20 children would prove nothing more
        assert gatekeeper_in_process("check", str(run), "-p", str(policy), "-q").returncode == 0
    # with 5 runs, one of them 10% off, the band's own spread already reaches that far
    five = [*runs[:4], runs[19]]
    out = gatekeeper("suggest", *map(str, five), "-o", str(tmp_path / "five.yaml"))
    said = _said(out.stdout, "train-shifted-step0")
    assert "4 of 5 held-out runs pass; failed by healthy-20" in said
    assert "; kept, its 0." in said and "reaches 1.25 x that far" in said


def test_two_runs_say_the_bands_are_unchecked(tmp_path):
    runs = healthy_runs(tmp_path, seeds=range(1, 3))
    out = gatekeeper("suggest", *map(str, runs), "-o", str(tmp_path / "p.yaml"))
    assert out.returncode == 0 and "leave-one-out: not run: it needs 3 runs" in out.stdout
    assert 'leave-one-out: not run"' in (tmp_path / "p.yaml").read_text()


def _constant_runs(tmp_path: Path, values: list[float]) -> list[str]:
    """One JSONL run per value, `loss` at that value for 20 steps."""
    paths = []
    for i, value in enumerate(values):
        path = tmp_path / f"r{i}.jsonl"
        rows = (json.dumps({"step": s, "loss": value}) + "\n" for s in range(20))
        path.write_text("".join(rows))  # json writes a NaN as Python's json does: NaN
        paths.append(str(path))
    return paths


def test_subnormal_values_are_banded_not_a_division_by_zero(tmp_path):
    """5e-324: rounding a band's end divided by 10**-326, which is 0.0, exit 70. A
    subnormal end is kept as it is; the policy loads and passes its runs."""
    runs = _constant_runs(tmp_path, [5e-324, 5e-324, 5e-324])
    out = gatekeeper("suggest", *runs, "-o", str(tmp_path / "s.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    check = gatekeeper("check", runs[0], "-p", str(tmp_path / "s.yaml"), "-q")
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize(("values", "why"), [
    ([1.0, 1.7e308], "overflows float64"),  # the band's spread is past float64
    ([float("nan"), float("nan")], "NaN/Inf in r0, r1"),
])
def test_runs_of_which_nothing_can_be_banded_are_exit_2_and_write_nothing(tmp_path, values, why):
    """A band past float64 was written as `np.float64(-inf)`, a policy that does not load
    (exit 2 naming the written file); no band at all wrote `rules: []` with exit 0, a
    policy that does not load either. Both are exit 2 saying why, and no file."""
    out = gatekeeper("suggest", *_constant_runs(tmp_path, values), "-o", str(tmp_path / "s.yaml"))
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("gatekeeper: error: suggest: no metric could be banded (")
    assert why in line, line
    assert not (tmp_path / "s.yaml").exists()
