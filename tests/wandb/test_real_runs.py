"""What runs written the way HF Trainer / TRL / Lightning configure wandb must never pass.

Every run here is written by the real wandb SDK (offline) in a child process; see
trainers.py for how each library's `define_metric` setup is mirrored.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.live.detect import DetectingSource
from gatekeeper.sources import open_source
from tests.wandb.conftest import REPO, sdk_env, write_run

TRAINERS = Path(__file__).with_name("trainers.py")


def train(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, str(TRAINERS), *args], env=sdk_env(root), cwd=root,
        capture_output=True, text=True, timeout=120,
    )


def gate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args], capture_output=True, text=True,
        timeout=180, env={**(env or os.environ), "PYTHONPATH": str(REPO)}, cwd=REPO,
    )


def policy(tmp_path: Path, rules: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(f"version: 1\nname: real\nrules:\n{rules}")
    return path


LOSS_MAX = "  - {id: loss, metric: train/loss, check: {max: 10}}\n"


def test_hf_trainer_axes_put_every_point_on_train_global_step(tmp_path: Path) -> None:
    """transformers 4.4x WandbCallback: `*` on `train/global_step` (step_sync)."""
    assert train(tmp_path, "hf", "40").returncode == 0
    run = open_source(str(tmp_path / "wandb")).read()
    loss = run.series["train/loss"]
    assert loss.step_key == "train/global_step"
    np.testing.assert_array_equal(loss.steps, np.arange(40))
    np.testing.assert_allclose(loss.values, 1.0 / (np.arange(40) + 1))


def test_trl_null_values_are_non_finite_points(tmp_path: Path) -> None:
    """TRL (GRPOTrainer through transformers' WandbCallback), as the field trial recorded
    it: a broken reward function's all-NaN metric is logged as `None` from step 7 of 30,
    written as `value_json: "null"`. `finite` and `steps: last` must not pass on the 7
    numbers before it."""
    assert train(tmp_path, "hf", "30", "--null-after", "7").returncode == 0
    pol = policy(
        tmp_path,
        "  - {id: finite, metric: rewards/broken, check: {finite: true}}\n"
        "  - {id: last, metric: rewards/broken, steps: last, check: {min: 0.5}}\n",
    )
    out = tmp_path / "v.json"
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol), "-q", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = {r["rule"]: r for r in json.loads(out.read_text())["results"]}
    assert results["finite"]["status"] == "error" and results["finite"]["step"] == 7
    assert "non-finite value NaN at train/global_step 7" in results["finite"]["message"]
    assert results["last"]["status"] == "error" and results["last"]["step"] == 29
    run = open_source(str(tmp_path / "wandb")).read()
    assert len(run.series["rewards/broken"]) == 30


def test_crashed_trainer_fails_the_gate_unless_allowed_with_a_reason(tmp_path: Path) -> None:
    """A trainer that raised at step 110 of 150: wandb records exit code 1 (`failed`)."""
    proc = train(tmp_path, "hf", "150", "--raise-at", "110")
    assert proc.returncode == 1 and "trainer failed at step 110" in proc.stderr
    pol = policy(tmp_path, LOSS_MAX)
    out = tmp_path / "v.json"
    run_dir = str(tmp_path / "wandb")
    proc = gate("check", run_dir, "-p", str(pol), "-q", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run state: failed, wandb exit code 1" in proc.stdout
    verdict = json.loads(out.read_text())
    state = [r for r in verdict["results"] if r["rule"] == "run-state"]
    assert state and state[0]["status"] == "error" and verdict["run"]["state"] == "failed"
    loss = [r for r in verdict["results"] if r["rule"] == "loss"][0]
    assert loss["status"] == "pass" and loss["judged"] == 110
    relaxed = gate("check", run_dir, "-p", str(pol), "-q", "--json", str(out),
                   "--allow-state", "failed:preemption drill, tracked in #12")
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    state = [r for r in json.loads(out.read_text())["results"] if r["rule"] == "run-state"]
    assert state[0]["status"] == "skip"
    assert state[0]["override"] == "preemption drill, tracked in #12"
    bad = gate("check", run_dir, "-p", str(pol), "--allow-state", "failed")
    assert bad.returncode == 2 and "STATE:REASON" in bad.stderr
    pol.write_text(pol.read_text() + "allow_states: {failed: 'crash drill, see #12'}\n")
    by_policy = gate("check", run_dir, "-p", str(pol), "-q", "--json", str(out))
    assert by_policy.returncode == 0, by_policy.stdout + by_policy.stderr
    state = [r for r in json.loads(out.read_text())["results"] if r["rule"] == "run-state"]
    assert state[0]["override"] == "policy real: crash drill, see #12"
    pol.write_text(pol.read_text().replace("{failed:", "{exploded:"))
    typo = gate("check", run_dir, "-p", str(pol))
    assert typo.returncode == 2 and "unknown state 'exploded'" in typo.stderr


def test_killed_writer_is_an_incomplete_run(tmp_path: Path) -> None:
    """SIGKILL to the trainer and its wandb-core: no exit record, judged as incomplete."""
    proc = subprocess.Popen(
        [sys.executable, str(TRAINERS), "hf", "100000", "--sleep", "0.001"],
        env=sdk_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("STEP 300 "):
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    pol = policy(tmp_path, LOSS_MAX)
    out = tmp_path / "v.json"
    checked = gate("check", str(tmp_path / "wandb"), "-p", str(pol), "-q", "--json", str(out))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    state = [r for r in json.loads(out.read_text())["results"] if r["rule"] == "run-state"][0]
    assert state["status"] == "error" and "incomplete" in state["message"]
    assert "no exit record" in state["message"]


def test_live_source_skips_runs_that_existed_before_the_watch(tmp_path: Path) -> None:
    """A reused WANDB_DIR holds a finished run; the watch follows only the new one, and a
    folder that does not exist yet (it will hold `wandb/`) is not followed as JSONL."""
    old = tmp_path / "reused"
    assert train(old, "plain", "5").returncode == 0
    said: list[str] = []
    reused = DetectingSource(str(old), said.append)
    later = DetectingSource(str(tmp_path / "later"), said.append)
    for source in (reused, later):
        poll = source.poll()
        assert poll.points == 0 and not poll.ended  # the old run is never judged
    assert train(old, "plain", "7").returncode == 0
    assert train(tmp_path / "later", "plain", "9").returncode == 0
    for source, steps in ((reused, 7), (later, 9)):
        poll = source.poll()
        assert poll.ended and len(poll.series["loss"]) == steps
        assert poll.run.run_id and poll.run.run_id in said[-1]
    waiting, following = said[0], said[1:]
    assert waiting.startswith(f"gatekeeper: waiting for a new wandb run in {old} (1 earlier")
    assert all("following wandb run" in s and "started after" in s for s in following)
    # a run already in progress is followed when named: its directory, or latest-run
    attach = DetectingSource(str(old / "wandb" / "latest-run"), said.append)
    assert len(attach.poll().series["loss"]) == 7 and "named on the command line" in said[-1]


@pytest.mark.parametrize("source", [".", "wandb/latest-run"])
def test_run_in_a_reused_wandb_dir_stops_the_new_broken_run_and_names_it(
    tmp_path: Path, source: str
) -> None:
    """`--source` the folder that holds `wandb/`, or `wandb/latest-run` (which points to
    the earlier run when `run` starts): either way the run CMD creates is gated."""
    root = tmp_path / "work"
    old_run = open_source(str(write_run(root, 20))).read()
    pol = policy(tmp_path, LOSS_MAX)
    out = tmp_path / "v.json"
    proc = gate(
        "run", "-p", str(pol), "--source", str(root / source), "--interval", "0.2",
        "--grace", "20",
        "--json", str(out), "--",
        sys.executable, str(TRAINERS), "hf", "20000", "--bad-at", "3", "--sleep", "0.002",
        env=sdk_env(root),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = json.loads(out.read_text())
    assert verdict["run"]["id"] != old_run.run_id
    following = [ln for ln in proc.stdout.splitlines() if "following wandb run" in ln]
    assert len(following) == 1 and verdict["run"]["id"] in following[0]
    stopped = verdict["stopped"]
    assert stopped["rule"] == "real/loss" and stopped["step"] == 3
    assert stopped["last_step"] >= 3 and stopped["last_step_key"] == "train/global_step"
    assert stopped["exit_code"] is not None and verdict["run"]["command_exit_code"] is not None
    assert stopped["last_step"] < 19999  # stopped long before the end


def test_a_stopped_trainer_that_unwinds_keeps_its_tail_and_ends_failed(tmp_path: Path) -> None:
    """SIGTERM goes to the trainer first; one that unwinds on it (`sys.exit` in a handler,
    so `wandb.finish` runs) leaves every logged step in the file and an exit record
    (state `failed`, exit code 143). wandb 0.31 offline."""
    root = tmp_path / "work"
    pol = policy(tmp_path, LOSS_MAX)
    proc = gate(
        "run", "-p", str(pol), "--source", str(root), "--interval", "0.2", "--grace", "20",
        "--", sys.executable, str(TRAINERS), "hf", "20000", "--bad-at", "3", "--sleep",
        "0.002", "--exit-on-sigterm",
        env=sdk_env(root),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = max(int(ln.split()[1]) for ln in proc.stdout.splitlines() if ln.startswith("STEP "))
    run = open_source(str(root / "wandb")).read()
    assert run.state.value == "failed" and run.state_detail == "wandb exit code 143"
    steps = run.series["train/loss"].steps
    # every step the trainer printed is in the file (the signal may land between a log
    # call and its print, so the file may hold one more)
    assert int(steps[-1]) in (last, last + 1)
    np.testing.assert_array_equal(steps, np.arange(len(steps)))


def test_a_trainer_that_dies_before_logging_exits_with_its_own_code(tmp_path: Path) -> None:
    pol = policy(tmp_path, LOSS_MAX)
    out = tmp_path / "v.json"
    proc = gate(
        "run", "-p", str(pol), "--source", str(tmp_path / "work"), "--interval", "0.2",
        "--json", str(out), "--", sys.executable, "-c", "import sys; sys.exit(3)",
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "command exited with code 3 before logging any metric" in proc.stdout
    assert json.loads(out.read_text())["run"]["command_exit_code"] == 3


@pytest.mark.parametrize("style", ["lightning"])
def test_lightning_axis(style: str, tmp_path: Path) -> None:
    """Lightning 2.x WandbLogger: `*` on `trainer/global_step` (step_sync)."""
    assert train(tmp_path, style, "12").returncode == 0
    run = open_source(str(tmp_path / "wandb")).read()
    assert run.series["train_loss"].step_key == "trainer/global_step"
    np.testing.assert_array_equal(run.series["train_loss"].steps, np.arange(12))


def test_a_fractional_step_metric_is_refused_not_truncated(tmp_path: Path) -> None:
    """A fractional epoch (0.25, 0.5, ...) used as a step metric: truncating it would put
    four points on each step; the read is refused naming the metric and the value."""
    assert train(tmp_path, "plain", "8", "--eval-on-epoch").returncode == 0
    pol = policy(tmp_path, "  - {id: e, metric: eval/loss, check: {max: 10}}\n")
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "metric eval/loss is on step metric epoch" in proc.stderr
    assert "0.25 is not a whole number" in proc.stderr and ".wandb" in proc.stderr


def test_summary_only_metrics_are_judged_as_step_less_values(tmp_path: Path) -> None:
    """transformers' WandbCallback writes `train_loss`/`train_runtime` (its
    `single_value_scalars`) to the run summary only, never to the history."""
    assert train(tmp_path, "hf", "10").returncode == 0
    pol = policy(
        tmp_path,
        "  - {id: loss, metric: train_loss, check: {max: 1.0}}\n"
        "  - {id: runtime, metric: train_runtime, check: {max: 5}}\n"
        "  - {id: stepped, metric: train_loss, steps: [0], check: {max: 1.0}}\n"
        "  - {id: absent, metric: train_nothing, check: {max: 1.0}}\n",
    )
    out = tmp_path / "v.json"
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol), "-q", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = {r["rule"]: r for r in json.loads(out.read_text())["results"]}
    assert results["loss"]["status"] == "pass" and results["loss"]["value"] == 0.42
    assert results["loss"]["message"].startswith("summary value (no step)")
    assert results["loss"]["step"] is None
    assert results["runtime"]["status"] == "fail" and results["runtime"]["value"] == 12.5
    assert results["stepped"]["status"] == "error" and "only a summary value" in (
        results["stepped"]["message"]
    )
    assert results["absent"]["status"] == "error" and "not in the run" in (
        results["absent"]["message"]
    )


def test_a_flat_dotted_key_and_a_nested_key_of_one_name_are_refused(tmp_path: Path) -> None:
    """`{"gpu.mem": x}` and `{"gpu": {"mem": y}}` would both be `gpu.mem`: never merged."""
    assert train(tmp_path, "plain", "4", "--collide").returncode == 0
    pol = policy(tmp_path, "  - {id: m, metric: gpu.mem, check: {max: 100}}\n")
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'metric gpu.mem is logged both as the flat key "gpu.mem" and nested' in proc.stderr
    assert '{"gpu": {"mem"}}' in proc.stderr


def test_last_on_a_metric_that_stopped_early_says_so(tmp_path: Path) -> None:
    """`reward` logged for steps 0-7 of a 30-step HF run: `steps: last` would judge step 7
    as the run's end. It is an error naming both steps."""
    assert train(tmp_path, "hf", "30", "--reward-until", "8").returncode == 0
    pol = policy(
        tmp_path,
        "  - {id: last, metric: reward, steps: last, check: {min: 0.5}}\n"
        "  - {id: tail, metric: reward, steps: {last: 3}, check: {min: 0.5}}\n"
        "  - {id: all, metric: reward, check: {min: 0.5}}\n",
    )
    out = tmp_path / "v.json"
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol), "-q", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = {r["rule"]: r for r in json.loads(out.read_text())["results"]}
    for rule in ("last", "tail"):
        assert results[rule]["status"] == "error"
        assert "points end at train/global_step 7, but the run reaches train/global_step 29" in (
            results[rule]["message"]
        )
    assert results["all"]["status"] == "pass"


def test_watch_of_a_reused_folder_never_reports_the_old_run(
    failed_run: Path, tmp_path: Path
) -> None:
    """Before: `watch wandb/` bound `latest-run` (a finished run) and exited at once with
    its verdict. Now it waits for a new run; with none, `--idle-timeout` ends it with the
    rules' metrics missing — an error, never the old run's verdict."""
    reused = tmp_path / "wandb"
    shutil.copytree(failed_run, reused, symlinks=True)
    old = open_source(str(reused)).read()
    pol = policy(tmp_path, "  - {id: loss, metric: train/loss, check: {max: 10}}\n")
    out = tmp_path / "v.json"
    proc = gate("watch", str(reused), "-p", str(pol), "--interval", "0.2",
                "--idle-timeout", "1.5", "-q", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = json.loads(out.read_text())
    assert old.run_id and old.run_id not in json.dumps(verdict)
    assert verdict["results"][0]["status"] == "error"
    assert "following wandb run" not in proc.stdout
