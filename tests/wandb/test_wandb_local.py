"""The local wandb source on runs written by the real SDK (offline mode, child processes)."""

from __future__ import annotations

import json
import math
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.cli.main import main
from gatekeeper.errors import SourceNotFound
from gatekeeper.model import RunState
from gatekeeper.sources import open_source
from gatekeeper.sources.wandb.local import WandbLocalSource
from tests.wandb.conftest import start_writer

STEPS = 3000


def test_each_metric_on_its_define_metric_axis(miles_run: Path) -> None:
    run = open_source(str(miles_run)).read()
    axes = {m: s.step_key for m, s in run.series.items()}
    assert axes["train/loss"] == "train/step"
    assert axes["rollout/raw_reward"] == "rollout/step"
    assert axes["perf/step_time"] == "rollout/step"
    assert axes["eval/score"] == "eval/step"
    assert axes["sys.gpu.mem"] == "_step"  # nested key, no step metric declared
    assert axes["train/step"] == "_step"  # a step metric is not on its own axis
    loss = run.series["train/loss"]
    assert len(loss) == STEPS
    np.testing.assert_array_equal(loss.steps, np.arange(STEPS))
    np.testing.assert_allclose(loss.values, 1.0 / (np.arange(STEPS) + 1))
    reward = run.series["rollout/raw_reward"]
    np.testing.assert_array_equal(reward.steps, np.arange(STEPS // 2))
    np.testing.assert_allclose(reward.values, np.arange(0, STEPS, 2) / 1000.0)


def test_sparse_nested_and_non_finite_values(miles_run: Path) -> None:
    run = open_source(str(miles_run)).read()
    score = run.series["eval/score"]  # logged every 10 steps only
    np.testing.assert_array_equal(score.steps, np.arange(STEPS // 10))
    np.testing.assert_allclose(score.values, np.arange(0, STEPS, 10) / 10.0)
    grad = run.series["train/grad_norm"]
    assert math.isnan(grad.values[5]) and grad.values[6] == math.inf
    assert np.isfinite(np.delete(grad.values, [5, 6])).all()
    np.testing.assert_allclose(run.series["sys.gpu.mem"].values, np.arange(STEPS))


def test_metadata_and_final_state(miles_run: Path, failed_run: Path) -> None:
    run = open_source(str(miles_run)).read()
    assert run.state is RunState.FINISHED
    assert set(run.tags) == {"ci", "grpo"}
    assert run.config["lora_rank"] == 8 and run.config["model"]["name"] == "qwen3-4b"
    assert "_wandb" not in run.config
    assert run.run_id and run.source.endswith(run.run_id)
    assert open_source(str(failed_run)).read().state is RunState.FAILED


def test_accepts_wandb_folder_latest_run_parent_and_file(miles_run: Path) -> None:
    run_dir = Path(os.path.realpath(miles_run / "latest-run"))
    log_file = next(run_dir.glob("*.wandb"))
    specs = [miles_run, miles_run.parent, run_dir, log_file]
    reads = [open_source(str(spec)).read() for spec in specs]
    assert all(isinstance(open_source(str(s)), WandbLocalSource) for s in specs)
    assert {len(r.series["train/loss"]) for r in reads} == {STEPS}
    with pytest.raises(SourceNotFound, match="not a wandb run"):
        WandbLocalSource(str(miles_run.parent / "elsewhere" / "wandb")).read()


def test_a_watch_may_start_before_the_run_exists(miles_run: Path, tmp_path: Path) -> None:
    future = tmp_path / "wandb"
    source = open_source(str(future))
    assert isinstance(source, WandbLocalSource)
    assert isinstance(source, WandbLocalSource) and source.poll().points == 0
    shutil.copytree(miles_run, future, symlinks=True)
    poll = source.poll()
    assert len(poll.series["train/loss"]) == STEPS and poll.ended


def test_polls_are_incremental_and_resume_from_a_cursor(miles_run: Path, tmp_path: Path) -> None:
    """A file copied in pieces, polled after each piece, equals one read of the whole."""
    src_file = next(Path(os.path.realpath(miles_run / "latest-run")).glob("*.wandb"))
    data = src_file.read_bytes()
    run_dir = tmp_path / "wandb" / "offline-run-20260101_000000-copy"
    run_dir.mkdir(parents=True)
    target = run_dir / src_file.name
    target.write_bytes(b"")
    source = WandbLocalSource(str(run_dir))
    got: dict[str, list[np.ndarray]] = {}
    cuts = [0, 5, 7, 1000, 40_000, 300_000, len(data) // 2, len(data) - 3, len(data)]
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:], strict=False)):
        with open(target, "ab") as fh:
            fh.write(data[lo:hi])
        if i == 4:  # hand over to a fresh source, as a restarted daemon would
            cursor = json.loads(json.dumps(source.cursor()))
            source = WandbLocalSource(str(run_dir))
            source.restore(cursor)
        poll = source.poll()
        assert poll.ended == (hi == len(data))
        for metric, series in poll.series.items():
            got.setdefault(metric, []).append(series.steps)
    whole = open_source(str(src_file)).read()
    for metric, series in whole.series.items():
        np.testing.assert_array_equal(np.concatenate(got[metric]), series.steps)


def test_a_cursor_saved_by_the_previous_version_goes_on_from_its_offset(
    miles_run: Path, tmp_path: Path
) -> None:
    """A daemon's saved cursor of version 1 (one `.wandb` file and its offset) is taken
    up where it stopped after an upgrade, not refused: the rest of the run, no point twice."""
    src_file = next(Path(os.path.realpath(miles_run / "latest-run")).glob("*.wandb"))
    data = src_file.read_bytes()
    run_dir = tmp_path / "wandb" / "offline-run-20260101_000000-old"
    run_dir.mkdir(parents=True)
    target = run_dir / src_file.name
    target.write_bytes(data[: len(data) // 2])
    source = WandbLocalSource(str(run_dir))
    before = source.poll().series["train/loss"].steps
    saved = source.cursor()
    old = {k: saved[k] for k in ("offset", "axes", "carry", "meta", "state")}
    old |= {"version": 1, "file": str(target)}
    target.write_bytes(data)
    source = WandbLocalSource(str(run_dir))
    source.restore(json.loads(json.dumps(old)))
    after = source.poll().series["train/loss"].steps
    np.testing.assert_array_equal(np.concatenate([before, after]), np.arange(STEPS))


def test_read_while_the_child_is_still_logging(tmp_path: Path) -> None:
    proc = start_writer(tmp_path, 400, "--sleep", "0.005")
    try:
        seen: list[int] = []
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            if (tmp_path / "wandb" / "latest-run").exists():
                try:
                    run = open_source(str(tmp_path / "wandb")).read()
                except SourceNotFound:
                    continue  # the run dir exists, its .wandb file not yet
                loss = run.series.get("train/loss")
                n = len(loss) if loss is not None else 0
                if loss is not None:  # whatever was read is a whole prefix
                    np.testing.assert_array_equal(loss.steps, np.arange(n))
                if run.state.is_live:
                    seen.append(n)
            time.sleep(0.05)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert seen, "never saw the run while it was being written"
    final = open_source(str(tmp_path / "wandb")).read()
    assert final.state is RunState.FINISHED and len(final.series["train/loss"]) == 400


def test_writer_killed_with_sigkill_keeps_every_complete_record(tmp_path: Path) -> None:
    proc = start_writer(tmp_path, 200, "--forever")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "LOGGED"
    time.sleep(0.5)  # let wandb-core get some of it to disk, then kill it mid-stream
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    run_dir = Path(os.path.realpath(tmp_path / "wandb" / "latest-run"))
    log = next(run_dir.glob("*.wandb"))
    run = open_source(str(run_dir)).read()
    assert run.state is RunState.RUNNING  # no exit record: never judged as finished
    loss = run.series["train/loss"]
    assert len(loss) > 0
    np.testing.assert_array_equal(loss.steps, np.arange(len(loss)))
    np.testing.assert_allclose(loss.values, 1.0 / (np.arange(len(loss)) + 1))
    # the same holds when the kill lands in the middle of a record: cut the file there
    data = log.read_bytes()
    cut = tmp_path / "cut" / "run-cut.wandb"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) - 11])
    shorter = open_source(str(cut)).read().series["train/loss"]
    assert 0 < len(shorter) <= len(loss)
    np.testing.assert_array_equal(shorter.steps, np.arange(len(shorter)))


def test_check_cli_gates_a_wandb_run_and_annotates_it(
    miles_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "miles.yaml"
    policy.write_text(
        "version: 1\nname: miles-ci\nrules:\n"
        "  - id: kl-step0\n    metric: train/ppo_kl\n    steps: [0]\n"
        "    check: {abs_max: 1.0e-8}\n"
        "  - id: reward-late\n    metric: rollout/raw_reward\n    steps: [1000]\n"
        "    check: {min: 2.5}\n"
    )
    copy = tmp_path / "wandb"
    shutil.copytree(miles_run, copy, symlinks=True)
    out_json = tmp_path / "verdict.json"
    args = ["check", str(copy), "-p", str(policy), "-q", "--annotate", "--json", str(out_json)]
    assert main(args) == 1
    verdict = json.loads(out_json.read_text())
    bad = [r for r in verdict["results"] if r["status"] == "fail"]
    assert [(r["rule"], r["step"], r["step_key"]) for r in bad] == [
        ("reward-late", 1000, "rollout/step")
    ]
    written = json.loads((Path(os.path.realpath(copy / "latest-run")) /
                          "gatekeeper-verdict.json").read_text())
    assert written["tag"] == "gate:fail"
    assert written["summary"]["gatekeeper/failing_rules"] == ["miles-ci/reward-late"]
    assert written["summary"]["gatekeeper/report"] == str(out_json)
    assert "annotated" in capsys.readouterr().out


def test_cli_exit_2_on_an_unreadable_wandb_file(tmp_path: Path) -> None:
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(b"not a wandb file at all")
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\nname: p\nrules:\n  - id: r\n    metric: a\n    check: {max: 1}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "check", str(bad), "-p", str(policy)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "not a wandb transaction log" in proc.stderr and str(bad) in proc.stderr


def test_watch_follows_a_live_wandb_run_to_its_end_and_annotates(
    tmp_path: Path, failed_run: Path
) -> None:
    """`watch wandb/` follows the run that starts after it (the SDK's own files, written
    live by writer.py) to its end and writes the verdict into that run's directory.

    The folder already holds an earlier run (a reused `wandb/`), and the writer starts
    only once the watch has said it waits for a new one: a run created before the watch
    has looked is an earlier run and is rightly not followed, so starting both at once
    raced on a loaded machine (the watch then waited for a new run until the test's
    timeout)."""
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\nname: live\nrules:\n"
        "  - id: kl-step0\n    metric: train/ppo_kl\n    steps: [0]\n"
        "    check: {abs_max: 1.0e-8}\n"
        "  - id: eval-20\n    metric: eval/score\n    steps: [20]\n    check: {min: 19}\n"
    )
    root = tmp_path / "train"
    shutil.copytree(failed_run, root / "wandb", symlinks=True)
    watch = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "watch", str(root / "wandb"), "-p",
         str(policy), "--annotate", "--interval", "0.2", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    writer = None
    try:
        assert watch.stdout is not None
        ready, _, _ = select.select([watch.stdout], [], [], 60)  # its first line, bounded
        first = watch.stdout.readline() if ready else "(nothing in 60 s)"
        assert first.startswith("gatekeeper: waiting for a new wandb run"), first
        writer = start_writer(root, 300, "--sleep", "0.005")
        out, err = watch.communicate(timeout=120)
        assert writer.wait(timeout=60) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        if writer is not None and writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
    assert watch.returncode == 0, first + out + err
    assert "following wandb run" in out and "started after the watch began" in out, out
    written = json.loads(
        (Path(os.path.realpath(root / "wandb" / "latest-run")) / "gatekeeper-verdict.json")
        .read_text()
    )
    assert written["tag"] == "gate:pass" and written["final"] is True
    assert written["run"]["state"] == "finished"


def _written_and_checked(writer: str, rule: str, tmp_path: Path) -> tuple[Path, Path, Any, Any]:
    """The offline run a writer script of this folder leaves (its directory and log), a
    policy of one `rule`, and that rule's result as `check` judges the run."""
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.session import judge_whole
    from tests.helpers import write_policy
    from tests.wandb.conftest import sdk_env

    root = tmp_path / "sdk"
    root.mkdir()
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name(writer))],
                          env=sdk_env(root), cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = (root / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("*.wandb")
    text = f"version: 1\nname: p\nrules:\n  - {rule}\n"
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    checked = judge_whole(policies, WandbLocalSource(str(run_dir)).read())[1].results[0]
    return run_dir, log, policies, checked


def _empty_copy(run_dir: Path, log: Path, where: Path) -> Path:
    """A copy of the run directory under `where` whose log is empty (to be grown)."""
    copy = where / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / log.name).write_bytes(b"")
    return copy


def _grow(log: Path, data: bytes, seed: int) -> Iterator[int]:
    """Append `data` to `log` in random chunks of 50-600 bytes, as wandb-core flushes;
    yields the bytes written after each."""
    r, at = random.Random(seed), 0
    while at < len(data):
        end = min(len(data), at + r.randint(50, 600))
        with open(log, "ab") as fh:
            fh.write(data[at:end])
        at = end
        yield at


def test_a_step_axis_going_back_is_judged_live_as_check_judges_it(tmp_path: Path) -> None:
    """wandb 0.2x SDK, offline: `train/global_step` 0..20 with a high loss at 16, then a
    resume from step 10 logging 10..15 with a high loss at 15. `check` sorts the points
    by step, so 15 (resumed, high) and 16 (first, high) are two in a row and `for: 2`
    fails. Polled as the log grows (random byte chunks), the resumed points came after
    step 20: the watch passed what `check` fails. The poll that brings a point below a
    step delivered now reads the run again whole (`Poll.reset`)."""
    from gatekeeper.session import JudgingSession

    run_dir, log, policies, checked = _written_and_checked(
        "step_back_writer.py", "{id: hi, metric: train/loss, check: {max: 1.0}, for: 2}", tmp_path
    )
    data = log.read_bytes()
    assert (checked.status.value, checked.step) == ("fail", 16)
    for seed in range(3):
        copy = _empty_copy(run_dir, log, tmp_path / f"copy{seed}")
        source, session = WandbLocalSource(str(copy)), JudgingSession(policies, live=True)
        resets = 0
        for _ in _grow(copy / log.name, data, seed):
            poll = source.poll()
            resets += poll.reset
            session.feed(poll.series, poll.run, reset=poll.reset)
        polled = session.verdict(final=True).results[0]
        assert (polled.status, polled.message) == (checked.status, checked.message), seed
        assert resets >= 1, seed  # once a poll that brings one of the resumed points


def test_a_config_key_set_mid_run_that_changes_a_period_is_judged_live_as_check_judges_it(
    tmp_path: Path,
) -> None:
    """wandb 0.2x SDK, offline: `steps: {every: config.k, default: 2}` over steps 0..9
    (9.0 at step 4) judged by the default, then `run.config.update({"k": 3})` and steps
    10..19. `check` reads k = 3 and passes (step 4 is not selected). Followed as the log
    grows in random byte chunks, the gate went on with the period it had (FAIL at 4); it
    now reads the run again from its start when the config changes the period."""
    from gatekeeper.live.gate import LiveGate

    rule = "{id: r, metric: train/loss, check: {max: 5}, steps: {every: config.k, default: 2}}"
    run_dir, log, policies, checked = _written_and_checked("config_late_writer.py", rule, tmp_path)
    data = log.read_bytes()
    assert (checked.status.value, checked.judged) == ("pass", 7)
    for seed in range(3):
        copy = _empty_copy(run_dir, log, tmp_path / f"copy{seed}")
        gate = LiveGate(WandbLocalSource(str(copy)), policies, started=0.0)
        said = [gate.poll(float(at)).verdict.results[0].status.value
                for at in _grow(copy / log.name, data, seed)]
        assert "fail" in said, seed  # the default period selected step 4 for a while
        polled = gate.judge(float(len(data)), final=True).results[0]
        assert (polled.status, polled.message) == (checked.status, checked.message), seed
