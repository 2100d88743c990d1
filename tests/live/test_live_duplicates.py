"""A duplicate step in a miles record is an error while watching live, as `check` makes
it: within one poll, across polls, across a run directory's per-process files, and across
a restore of the saved cursor; never for points a rewritten file only gives again, nor for
rows (a train and an eval row may share a step). Files are written as miles' capture
writes them (one `{"metric", "series"}` line per metric, the file rewritten by temp +
rename on every log)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.errors import SourceError
from gatekeeper.sources.jsonl.live import LiveJsonlSource
from gatekeeper.sources.jsonl.source import JsonlSource
from tests.helpers import REPO, gatekeeper, write_record, write_rows
from tests.miles.capture import CiCapture, Variant, capture_run

GRAD, KL, REWARD = "train/grad_norm", "train/ppo_kl", "rollout/raw_reward"
TAIL = "; a record holds one point per step"
PACK = str(REPO / "policies" / "miles")


def _dup(step_key: str, step: int, count: int) -> str:
    return f"duplicate {step_key} {step} ({count} points){TAIL}"


def _line(metric: str, points: list[tuple[int, float]]) -> str:
    return json.dumps({"metric": metric, "series": [[s, v] for s, v in points]}) + "\n"


def _append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def _check_errors(path: Path) -> dict[str, str]:
    return JsonlSource(str(path)).read().metric_errors


def test_duplicate_inside_one_poll_reads_as_check_says_it(tmp_path: Path) -> None:
    path = write_record(
        tmp_path / "r.jsonl",
        {GRAD: [(0, 0.2), (1, 0.3), (2, 0.2)], REWARD: [(0, 0.5), (1, 0.6), (1, 0.7), (2, 0.5)]},
    )
    poll = LiveJsonlSource(str(path)).poll()
    assert poll.run.metric_errors == {REWARD: _dup("rollout/step", 1, 2)}
    assert poll.run.metric_errors == _check_errors(path)
    assert poll.series[REWARD].steps.tolist() == [0, 1, 1, 2]  # the points are still read


def test_duplicate_across_polls_of_an_appended_record(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(_line(GRAD, [(s, 0.2) for s in range(5)]) + _line(KL, [(0, 0.0)]))
    src = LiveJsonlSource(str(path))
    assert src.poll().run.metric_errors == {}
    _append(path, _line(GRAD, [(5, 0.2), (6, 0.2)]))  # new steps: still one point a step
    assert src.poll().run.metric_errors == {}
    _append(path, _line(GRAD, [(3, 0.9)]))  # step 3 again, a poll later
    poll = src.poll()
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 3, 2)} == _check_errors(path)
    # a third point at step 3, then a smaller step twice: live says what check says
    _append(path, _line(GRAD, [(3, 1.0)]))
    assert src.poll().run.metric_errors == {GRAD: _dup("train/step", 3, 3)} == _check_errors(path)
    _append(path, _line(GRAD, [(1, 1.0)]) + _line(KL, [(1, 0.0)]))
    poll = src.poll()
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 1, 2)} == _check_errors(path)
    assert poll.points == 2


def test_duplicate_across_per_process_files_of_a_directory(tmp_path: Path) -> None:
    """Two processes logging the same key at the same step: miles' attempt directory."""
    attempt = capture_run(tmp_path / "k" / "attempt-0", Variant())
    src = LiveJsonlSource(str(attempt))
    assert src.poll().run.metric_errors == {}
    CiCapture(attempt, 1303).log({"rollout/step": 3, REWARD: 0.9}, "rollout/step")
    poll = src.poll()
    assert poll.points == 1
    assert poll.run.metric_errors == {REWARD: _dup("rollout/step", 3, 2)}
    assert poll.run.metric_errors == _check_errors(attempt)
    # read in one poll, the directory gives the same
    assert LiveJsonlSource(str(attempt)).poll().run.metric_errors == _check_errors(attempt)


def test_a_rewritten_record_gives_no_duplicate_for_points_it_repeats(tmp_path: Path) -> None:
    """miles rewrites the whole file (temp + rename) on every log: the points already
    emitted come again and are skipped, never a duplicate; a real one is still found."""
    capture = CiCapture(tmp_path / "attempt-0", 1201)
    src = LiveJsonlSource(str(capture.record_dir))
    steps: list[int] = []
    for step in range(6):
        capture.log({"train/step": step, GRAD: 0.2, KL: 0.0}, "train/step")
        poll = src.poll()
        assert poll.run.metric_errors == {}, step
        steps += poll.series[GRAD].steps.tolist()
    assert steps == list(range(6))
    capture.log({"train/step": 6, GRAD: 0.2}, "train/step")
    capture.log({"train/step": 7, GRAD: 0.2, KL: 0.0}, "train/step")  # two logs, one poll
    assert src.poll().run.metric_errors == {}
    capture.log({"train/step": 4, GRAD: 0.5}, "train/step")  # a retried step
    poll = src.poll()
    assert poll.series[GRAD].steps.tolist() == [4]
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 4, 2)}
    assert poll.run.metric_errors == _check_errors(capture.record_dir)


def test_rows_sharing_a_step_are_not_duplicates(tmp_path: Path) -> None:
    """HF Trainer rows: a train and an eval row at one step both carry `epoch`."""
    path = write_rows(
        tmp_path / "trainer.jsonl",
        [
            {"step": 10, "loss": 1.0, "epoch": 0.5},
            {"step": 10, "eval_loss": 1.1, "epoch": 0.5},
        ],
    )
    src = LiveJsonlSource(str(path))
    poll = src.poll()
    assert poll.series["epoch"].steps.tolist() == [10, 10]
    _append(path, json.dumps({"step": 10, "epoch": 0.5}) + "\n")  # and across polls
    poll = src.poll()
    assert poll.series["epoch"].steps.tolist() == [10]
    assert poll.run.metric_errors == {} == _check_errors(path)
    assert src.cursor()["seen"] == {}  # no step memory kept for rows


def test_a_metric_first_read_as_rows_then_logged_by_a_record_line(tmp_path: Path) -> None:
    """`check` judges every point of a metric any record line logs: a record line that
    repeats a step the metric's rows had, a poll later, is found as check finds it."""
    path = write_rows(tmp_path / "r.jsonl", [{"train/step": s, GRAD: 0.2} for s in range(3)])
    src = LiveJsonlSource(str(path))
    assert src.poll().run.metric_errors == {} == _check_errors(path)
    _append(path, _line(GRAD, [(3, 0.2), (1, 0.5)]))
    poll = src.poll()
    assert poll.series[GRAD].steps.tolist() == [1, 3]
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 1, 2)} == _check_errors(path)


def test_a_restored_cursor_still_finds_a_later_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(_line(GRAD, [(s, 0.2) for s in range(100)]) + _line(REWARD, [(0, 0.5)]))
    first = LiveJsonlSource(str(path))
    first.poll()
    saved = json.loads(json.dumps(first.cursor()))
    assert saved["seen"][GRAD] == {"steps": [0, 99], "dup": None}  # one interval
    _append(path, _line(GRAD, [(100, 0.2), (42, 0.2)]))
    resumed = LiveJsonlSource(str(path))
    resumed.restore(saved)
    poll = resumed.poll()
    assert poll.series[GRAD].steps.tolist() == [42, 100]
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 42, 2)} == _check_errors(path)
    # the error itself is saved: a restart with nothing new still reports it
    again = LiveJsonlSource(str(path))
    again.restore(json.loads(json.dumps(resumed.cursor())))
    assert again.poll().run.metric_errors == {GRAD: _dup("train/step", 42, 2)}


def test_a_version_1_cursor_recalls_the_steps_already_emitted(tmp_path: Path) -> None:
    """A cursor saved before this memory existed: the steps it emitted are read back once
    (not emitted again), so a later duplicate of one of them is still found."""
    capture = CiCapture(tmp_path / "attempt-0", 1201)
    for step in range(5):
        capture.log({"train/step": step, GRAD: 0.2}, "train/step")
    first = LiveJsonlSource(str(capture.record_dir))
    first.poll()
    old = json.loads(json.dumps(first.cursor()))
    old = {"version": 1, "files": old["files"], "step_keys": old["step_keys"]}
    capture.log({"train/step": 5, GRAD: 0.2}, "train/step")
    capture.log({"train/step": 2, GRAD: 0.2}, "train/step")
    resumed = LiveJsonlSource(str(capture.record_dir))
    resumed.restore(old)
    poll = resumed.poll()
    assert poll.series[GRAD].steps.tolist() == [2, 5]  # only the new points
    assert poll.run.metric_errors == {GRAD: _dup("train/step", 2, 2)}
    assert poll.run.metric_errors == _check_errors(capture.record_dir)
    assert resumed.cursor()["version"] == 2


def _good_cursor(tmp_path: Path) -> dict[str, Any]:
    path = write_record(tmp_path / "r.jsonl", {GRAD: [(0, 0.2), (1, 0.2), (5, 0.2)]})
    src = LiveJsonlSource(str(path))
    src.poll()
    return json.loads(json.dumps(src.cursor()))


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda c: c.pop("seen"), "seen: missing 'seen'"),
        (lambda c: c.update(seen=[1, 2]), "seen: expected an object"),
        (lambda c: c["seen"][GRAD].update(steps=[5, 6, 0, 1]), "intervals must be sorted"),
        (lambda c: c["seen"][GRAD].update(steps=[0, 1, 2, 5]), "not adjacent"),
        (lambda c: c["seen"][GRAD].update(steps=[3, 1]), "intervals must be sorted"),
        (lambda c: c["seen"][GRAD].update(steps=[0, 1, 5]), "[lo, hi] step pairs"),
        (lambda c: c["seen"][GRAD].update(steps=[0, "1"]), "[lo, hi] step pairs"),
        (lambda c: c["seen"][GRAD].update(steps=[0, 2**64]), "[lo, hi] step pairs"),
        (lambda c: c["seen"][GRAD].update(dup=[3, 1]), "points >= 2"),
        (lambda c: c["seen"].update({GRAD: "x"}), "expected an object, got str"),
        (lambda c: c.update(record_metrics="train/grad_norm"), "record_metrics"),
        (lambda c: c.update(metric_errors={GRAD: 3}), "metric_errors: expected an object"),
        (lambda c: c["files"].update({"x": {"offset": "a"}}), "files"),
        (lambda c: c["files"].update({"x": 7}), "files"),
    ],
)
def test_a_hostile_cursor_is_a_clear_source_error(tmp_path: Path, edit: Any, where: str) -> None:
    cursor = _good_cursor(tmp_path)
    src = LiveJsonlSource(str(tmp_path / "r.jsonl"))
    src.restore(json.loads(json.dumps(cursor)))
    before = src.cursor()
    edit(cursor)
    with pytest.raises(SourceError) as err:
        src.restore(cursor)
    assert "saved read position is malformed" in str(err.value)
    assert where in str(err.value) and "drop the saved state to re-read" in str(err.value)
    assert src.cursor() == before  # nothing of it was kept


@pytest.mark.parametrize("version", [None, 0, 3, "2"])
def test_an_unknown_cursor_version_is_refused(tmp_path: Path, version: Any) -> None:
    cursor = _good_cursor(tmp_path)
    cursor["version"] = version
    with pytest.raises(SourceError, match="drop the saved state to re-read") as err:
        LiveJsonlSource(str(tmp_path / "r.jsonl")).restore(cursor)
    assert f"has version {version!r}" in str(err.value)


def _statuses(verdict: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        f"{r['policy']}/{r['rule']}": (r["status"], r.get("message") or "")
        for r in verdict["results"]
    }


def _watch(attempt: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gatekeeper",
            "watch",
            str(attempt),
            "-p",
            PACK,
            *Variant().config_flags(),
            "--interval",
            "0.1",
            "--json",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _check(attempt: Path, out: Path) -> tuple[int, dict[str, tuple[str, str]]]:
    proc = gatekeeper(
        "check", str(attempt), "-p", PACK, *Variant().config_flags(), "--json", str(out)
    )
    return proc.returncode, _statuses(json.loads(out.read_text()))


def test_watch_of_a_finished_record_ends_as_check_rule_by_rule(tmp_path: Path) -> None:
    """A finished attempt directory (each process wrote its end marker) where a third
    process logged a step the rollout manager had logged: `gatekeeper watch` (a child
    process) ends with check's exit code, and each rule's status and message."""
    attempt = capture_run(tmp_path / "k" / "attempt-0", Variant())
    CiCapture(attempt, 1303).log({"rollout/step": 3, REWARD: 0.9}, "rollout/step")
    for f in attempt.glob("*.jsonl"):
        _append(f, '{"event": "end", "state": "finished"}\n')
    watch = _watch(attempt, tmp_path / "w.json")
    out, err = watch.communicate(timeout=120)
    code, checked = _check(attempt, tmp_path / "c.json")
    assert code == 1 and watch.returncode == code, out + err
    watched = _statuses(json.loads((tmp_path / "w.json").read_text()))
    assert watched == checked
    raw = watched["miles-ci-capture/raw-reward-finite"]
    assert raw[0] == "error" and _dup("rollout/step", 3, 2) in raw[1]
    assert watched["miles-ci-capture/grad-norm-finite"][0] == "pass"


def test_watch_stops_on_a_duplicate_logged_while_it_watches(tmp_path: Path) -> None:
    """The duplicate comes from a process that starts logging after the watch began: the
    watch stops with check's exit code and message; no rule it judged differs from check."""
    attempt = capture_run(tmp_path / "k" / "attempt-0", Variant())
    watch = _watch(attempt, tmp_path / "w.json", "--idle-timeout", "30")
    time.sleep(1.0)
    CiCapture(attempt, 1303).log({"rollout/step": 3, REWARD: 0.9}, "rollout/step")
    out, err = watch.communicate(timeout=120)
    code, checked = _check(attempt, tmp_path / "c.json")
    assert code == 1 and watch.returncode == code, out + err
    assert "no new point" not in out  # stopped by the duplicate, not by --idle-timeout
    watched = _statuses(json.loads((tmp_path / "w.json").read_text()))
    raw = "miles-ci-capture/raw-reward-finite"
    assert watched[raw] == checked[raw] and checked[raw][0] == "error"
    assert _dup("rollout/step", 3, 2) in watched[raw][1]
    judged = {k: s for k, (s, _) in watched.items() if s != "pending"}
    assert judged and judged == {k: checked[k][0] for k in judged}
