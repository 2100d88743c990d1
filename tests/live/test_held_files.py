"""`gatekeeper run`: what is already there when the watch begins is an earlier run (JSONL
record files until the command changes them; wandb and TensorBoard run directories).
What is there but cannot be read must never pass for absent (or a JSONL file for
rewritten): the earlier run would be judged as the command's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gatekeeper.live.detect import DetectingSource
from tests.helpers import gatekeeper, write_policy

PROBE = str(Path(__file__).with_name("held_probe.py"))
POLICY = """
version: 1
name: p
rules:
  - {id: loss, metric: train/loss, check: {max: 2.0}}
"""


def _earlier_run(path: Path) -> None:
    """A finished earlier run: steps 0..9, then its end marker."""
    rows = [json.dumps({"step": i, "train/loss": 1.0}) for i in range(10)]
    path.write_text("\n".join([*rows, json.dumps({"event": "end", "state": "finished"})]) + "\n")


def _probe(*args: str) -> list[dict[str, Any]]:
    proc = subprocess.run([sys.executable, PROBE, *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_run_refuses_an_unreadable_file_there_before_and_never_starts_the_command(
    tmp_path: Path,
) -> None:
    """A self-referencing link (ELOOP, which root cannot read past either) among the run
    folder's records: exit 2 naming it and the fix, before CMD runs (before the fix CMD
    ran and the first poll failed on it)."""
    run_dir = tmp_path / "d"
    run_dir.mkdir()
    os.symlink("a.jsonl", run_dir / "a.jsonl")
    policy = write_policy(tmp_path / "p.yaml", POLICY)
    marker = tmp_path / "ran"
    proc = gatekeeper("run", "-p", str(policy), "--source", str(run_dir), "--interval", "0.1",
                      "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert f"{run_dir / 'a.jsonl'}: cannot read: Too many levels of symbolic links" in error
    assert "fix it or move it away" in error
    assert not marker.exists()


def test_a_transient_error_at_the_start_is_an_error_not_an_absent_file(tmp_path: Path) -> None:
    """EMFILE while the earlier run's file, or the folder holding it, is looked at: an
    error naming it (before the fix: nothing held, so the earlier run would be judged as
    the command's)."""
    _earlier_run(tmp_path / "m.jsonl")
    for path in (tmp_path / "m.jsonl", tmp_path):  # the file; the folder (its listing)
        (step,) = _probe("start", str(path))
        assert step["error"].startswith(f"{path}: cannot read: Too many open files;"), step


def test_a_transient_error_on_a_held_file_leaves_it_held(tmp_path: Path) -> None:
    """EMFILE on a poll: the poll fails and the file stays held; readable again, it is
    still the earlier run (no points); once the command appends, the whole file is the
    run, as `check` reads it (before the fix the failed poll took it for rewritten and
    the next one emitted the earlier run's 10 points as the command's)."""
    path = tmp_path / "m.jsonl"
    _earlier_run(path)
    exhausted, after, appended = _probe("poll", str(path))
    assert "Too many open files" in exhausted["error"]
    assert after["points"] == 0
    assert appended["points"] == 11


def test_a_folder_of_earlier_runs_that_cannot_be_listed_is_an_error(tmp_path: Path) -> None:
    """EMFILE while `watch` (or `run`) lists the wandb folder and TensorBoard log dir it
    was given: an error naming the folder (before the fix both lists came back empty, so the
    earlier runs there -- and `wandb/latest-run` pointing to one -- were new)."""
    earlier = tmp_path / "wandb" / "run-20261207_000000-abc123"
    earlier.mkdir(parents=True)
    (earlier / "run-abc123.wandb").write_bytes(b"")
    (tmp_path / "wandb" / "latest-run").symlink_to(earlier.name)
    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_0" / "events.out.tfevents.1.host").write_bytes(b"")
    source = DetectingSource(str(tmp_path), print)  # listed: both runs seen
    assert (len(source.runs_before), source.tb_before) == (1, frozenset({"version_0"}))
    (step,) = _probe("detect", str(tmp_path))
    assert step["error"].startswith(f"{tmp_path}: cannot read: Too many open files;"), step
