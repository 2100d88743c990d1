"""`gatekeeper suggest`: bands from 5 healthy runs pass all 5 and fail broken runs."""

from __future__ import annotations

import re

import numpy as np

from tests.helpers import REPO, gatekeeper
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
    for run in runs:
        ok = gatekeeper("check", str(run), "-p", str(policy), "-q")
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
