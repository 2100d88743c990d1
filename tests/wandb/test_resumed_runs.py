"""A run resumed with the same id, offline: two `offline-run-<time>-<id>` segments.

Every run here is written by the real wandb SDK 0.31.0 (offline, wandb-core) in child
processes: `wandb.init(id=..., resume="allow")` twice. What that SDK writes, and what
gatekeeper makes of it (gatekeeper/sources/wandb/segments.py):

- `wandb.log(row, step=s)`: `_step` is `s` in the file, which `wandb sync` uploads as is
  and the wandb UI shows; gatekeeper keeps it, even where the resumed process logs steps
  the first segment already holds (both points are in the files, both are judged).
- `wandb.log(row)`: offline, each segment's own `_step` restarts at 0; such a segment is
  placed after the last step read, as before.
- a step below the current one within one process is dropped by the SDK ("Tried to log to
  step N that is less than the current step M") and is not in the file: nor in the run.

`check` and a `watch` (whole, and live while the resumed process writes) give one verdict.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.sources import open_source
from gatekeeper.sources.wandb.local import WandbLocalSource
from tests.wandb.conftest import sdk_env
from tests.wandb.test_real_runs import LOSS_MAX, TRAINERS, gate, policy, train
from tests.wandb.test_wandb_decode_reference import sdk_columns

PLAIN_LOSS_MAX = "  - {id: loss, metric: loss, check: {max: 10}}\n"


def resumed(root: Path, run_id: str, first: list[str], second: list[str]) -> Path:
    """Two segments of run `run_id` (trainers.py `plain` ARGS each); the second's dir."""
    assert train(root, "plain", *first, "--resume-id", run_id).returncode == 0
    time.sleep(1.1)  # the directory name carries the start time, to the second
    proc = train(root, "plain", *second, "--resume-id", run_id)
    assert proc.returncode == 0, proc.stderr[-2000:]
    segments = sorted((root / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(segments) == 2
    return segments[-1]


def verdicts(tmp_path: Path, spec: Path, rules: str) -> list[dict[str, Any]]:
    """The rule results of `check` and of `watch` on `spec`, asserted equal."""
    pol = policy(tmp_path, rules)
    got = []
    for command in ("check", "watch"):
        out = tmp_path / f"{command}.json"
        proc = gate(command, str(spec), "-p", str(pol), "-q", "--json", str(out))
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        got.append(json.loads(out.read_text())["results"])
    assert got[0] == got[1]
    return got[0]


def file_points(run_dir: Path, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of `metric` in one segment, as the SDK itself decodes its records."""
    steps, cols = sdk_columns(next(run_dir.glob("*.wandb")))
    rows, values = cols[metric]
    return np.array([steps[r] for r in rows]), np.array(values)


def test_explicit_steps_of_a_resumed_run_are_judged_where_they_were_logged(
    tmp_path: Path,
) -> None:
    """The issue's case: the first process logs `step=0..49`, the resumed one `step=40..89`
    with a bad loss at 45. Reported at step 45 (before: at `_step` 95, the segment being
    placed after step 49), by `check` and by `watch` of the run directory alike."""
    second = resumed(tmp_path, "expl01", ["50", "--explicit-step"],
                     ["90", "--start", "40", "--bad-at", "45", "--explicit-step"])
    loss = next(r for r in verdicts(tmp_path, second, PLAIN_LOSS_MAX) if r["rule"] == "loss")
    assert loss["status"] == "fail" and loss["step"] == 45 and loss["value"] == 50
    assert loss["judged"] == 100  # both segments: 0..49 and 40..89
    run = open_source(str(second)).read()
    want = np.sort(np.concatenate([np.arange(50), np.arange(40, 90)]), kind="stable")
    np.testing.assert_array_equal(run.series["loss"].steps, want)
    assert "resumed, 2 segments read" in run.state_detail


def test_implicit_steps_of_a_resumed_run_follow_the_first_segment(tmp_path: Path) -> None:
    """`wandb.log(row)` in both processes: offline the second segment's `_step` restarts
    at 0 in the file; it is placed after the first segment's 0..49, as before."""
    second = resumed(tmp_path, "impl01", ["50"], ["30", "--bad-at", "5"])
    np.testing.assert_array_equal(file_points(second, "loss")[0], np.arange(30))
    loss = next(r for r in verdicts(tmp_path, second, PLAIN_LOSS_MAX) if r["rule"] == "loss")
    assert loss["status"] == "fail" and loss["step"] == 55 and loss["judged"] == 80
    np.testing.assert_array_equal(open_source(str(second)).read().series["loss"].steps,
                                  np.arange(80))


@pytest.mark.parametrize("start", [10, 0])
def test_explicit_steps_that_go_back_on_resume_are_kept_as_the_files_hold_them(
    tmp_path: Path, start: int
) -> None:
    """The resumed process logs `step=START..29` after the first reached 49 (a trainer
    restarted from an earlier checkpoint). Offline the SDK cannot know the first
    segment's steps, so it drops nothing: both points of each step are in the files and
    are judged, the bad one at its logged step 20. `start` 0 is told apart from the SDK's
    own restart at 0 by its `set_step_log` telemetry. Within the resumed process, a last
    `step=15` (below 29) is dropped by the SDK with its warning: it is in no file, and
    not judged."""
    run_id = f"back{start:02d}"
    first = ["50", "--explicit-step"]
    second = ["30", "--start", str(start), "--bad-at", "20", "--explicit-step",
              "--late-step", "15"]
    assert train(tmp_path, "plain", *first, "--resume-id", run_id).returncode == 0
    time.sleep(1.1)
    env = {**sdk_env(tmp_path), "WANDB_SILENT": "false"}  # let the SDK's warning through
    proc = subprocess.run(
        [sys.executable, str(TRAINERS), "plain", *second, "--resume-id", run_id],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Tried to log to step 15 that is less than the current step 29" in (
        proc.stdout + proc.stderr
    )
    segments = sorted((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    steps_a, values_a = file_points(segments[0], "loss")
    steps_b, values_b = file_points(segments[1], "loss")
    np.testing.assert_array_equal(steps_b, np.arange(start, 30))  # no step 15 at the end
    order = np.argsort(np.concatenate([steps_a, steps_b]), kind="stable")
    run = open_source(str(segments[1])).read()
    np.testing.assert_array_equal(run.series["loss"].steps,
                                  np.concatenate([steps_a, steps_b])[order])
    np.testing.assert_array_equal(run.series["loss"].values,
                                  np.concatenate([values_a, values_b])[order])
    loss = next(r for r in verdicts(tmp_path, segments[1], PLAIN_LOSS_MAX)
                if r["rule"] == "loss")
    assert loss["status"] == "fail" and loss["step"] == 20 and loss["violations"] == 1
    assert loss["judged"] == 50 + 30 - start


def test_a_live_watch_of_a_resumed_run_equals_check(tmp_path: Path) -> None:
    """`watch wandb/` started between the two processes follows the resumed segment as it
    is written, after reading the first segment (part of the same run, as `check` reads
    it): its verdict equals `check`'s afterwards, bad step 45 included."""
    assert train(tmp_path, "plain", "50", "--explicit-step", "--resume-id", "live01"
                 ).returncode == 0
    pol = policy(tmp_path, PLAIN_LOSS_MAX)
    out = tmp_path / "watch.json"
    watch = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "watch", str(tmp_path / "wandb"), "-p",
         str(pol), "--interval", "0.2", "-q", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    writer = None
    try:
        assert watch.stdout is not None
        ready, _, _ = select.select([watch.stdout], [], [], 60)
        first = watch.stdout.readline() if ready else "(nothing in 60 s)"
        assert first.startswith("gatekeeper: waiting for a new wandb run"), first
        time.sleep(1.1)  # the resumed segment's directory must sort after the first one's
        writer = subprocess.Popen(
            [sys.executable, str(TRAINERS), "plain", "90", "--start", "40", "--bad-at", "45",
             "--explicit-step", "--sleep", "0.02", "--resume-id", "live01"],
            env=sdk_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )
        stdout, stderr = watch.communicate(timeout=120)
        assert writer.wait(timeout=60) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        if writer is not None and writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
    assert watch.returncode == 1, first + stdout + stderr
    assert "started after the watch began; resumed, its 1 earlier segment(s) read first" in (
        stdout
    )
    live = json.loads(out.read_text())
    whole = tmp_path / "check.json"
    proc = gate("check", str(tmp_path / "wandb"), "-p", str(pol), "-q", "--json", str(whole))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert live["results"] == json.loads(whole.read_text())["results"]
    loss = live["results"][0]
    assert loss["step"] == 45 and loss["judged"] == 100
    assert "resumed, 2 segments read" in live["run"]["state_detail"]


def test_a_resumed_hf_run_keeps_its_global_step_and_restarts_step(tmp_path: Path) -> None:
    """A trainer resumed from a checkpoint with the same run id (HF's `train/global_step`
    continues at 20): wandb 0.31 offline writes a second `offline-run-*-<id>` directory,
    whose `_step` restarts at 0. The bad step 5 is in the first segment."""
    first = train(tmp_path, "hf", "20", "--bad-at", "5", "--resume-id", "resumed01")
    assert first.returncode == 0
    time.sleep(1.1)  # the directory name carries the start time, to the second
    second = train(tmp_path, "hf", "40", "--start", "20", "--resume-id", "resumed01")
    assert second.returncode == 0
    assert len(list((tmp_path / "wandb").glob("offline-run-*-resumed01"))) == 2
    run = open_source(str(tmp_path / "wandb")).read()
    np.testing.assert_array_equal(run.series["train/loss"].steps, np.arange(40))
    assert "2 segments" in run.state_detail
    segment = Path(os.path.realpath(tmp_path / "wandb" / "latest-run"))
    loss = next(r for r in verdicts(tmp_path, segment, LOSS_MAX) if r["rule"] == "loss")
    assert loss["status"] == "fail" and loss["step"] == 5


def test_polls_with_a_cursor_handed_over_each_time_place_points_as_one_read(
    tmp_path: Path,
) -> None:
    """The resumed segment (`step=0..29` after `0..49`: told apart from the SDK's own
    restart only by its telemetry) copied in small pieces, each polled by a fresh source
    restored from the last one's cursor (a daemon restarted at every poll): the points,
    in poll order, are those of one read of the whole run -- in its order too: a poll
    that brings a step below one delivered reads the run again whole (`Poll.reset`)."""
    origin = tmp_path / "origin"
    resumed(origin, "cut01", ["50", "--explicit-step"],
            ["30", "--bad-at", "20", "--explicit-step"])
    first, second = sorted((origin / "wandb").glob("offline-run-*-cut01"))
    copy = tmp_path / "copy" / "wandb"
    shutil.copytree(first, copy / first.name)
    (copy / second.name).mkdir()
    log = next(second.glob("*.wandb"))
    data, target = log.read_bytes(), copy / second.name / log.name
    target.write_bytes(b"")
    cursor = None
    steps: list[np.ndarray] = []
    for lo in range(0, len(data), 1500):
        with open(target, "ab") as fh:
            fh.write(data[lo : lo + 1500])
        source = WandbLocalSource(str(copy / second.name))
        if cursor is not None:
            source.restore(cursor)
        poll = source.poll()
        cursor = json.loads(json.dumps(source.cursor()))
        if poll.reset:
            steps = []
        if "loss" in poll.series:
            steps.append(poll.series["loss"].steps)
    assert poll.ended
    whole = open_source(str(second)).read().series["loss"].steps
    np.testing.assert_array_equal(np.concatenate(steps), whole)
    np.testing.assert_array_equal(whole, np.sort(np.r_[np.arange(50), np.arange(30)]))
