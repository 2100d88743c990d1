"""Live TensorBoard without a prefix, and only what the command creates: `gatekeeper run
--source DIR -- CMD` and `gatekeeper watch` as child processes, the runs written by real
writers (tests/live/tb_trainer.py: torch 2.13's `torch.utils.tensorboard.SummaryWriter`,
Lightning 2.6's `TensorBoardLogger`) — issue 26, items 1, 2 and 9."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gatekeeper, write_policy

pytest.importorskip("tensorboard")
pytest.importorskip("torch.utils.tensorboard")
TRAINER = str(Path(__file__).with_name("tb_trainer.py"))
FAST = ("--interval", "0.1", "--progress-every", "1", "--grace", "5")


def _policy(tmp: Path) -> Path:
    return write_policy(
        tmp / "tb.yaml",
        """
        version: 1
        name: tb
        rules:
          - id: loss-bounded
            metric: train/loss
            check: {max: 2.0}
        """,
    )


def _train(directory: Path, *args: str) -> None:
    subprocess.run([sys.executable, TRAINER, str(directory), "--delay", "0", *args], check=True)


def test_run_follows_a_plain_directory_the_command_creates_and_stops_at_the_bad_point(
    tmp_path: Path,
) -> None:
    """No `tensorboard://`: the directory does not exist when the watch starts; the first
    event file settles the family, the "following" line says so, the bad point stops CMD."""
    run, out = tmp_path / "runs" / "exp", tmp_path / "v.json"
    proc = gatekeeper(
        "run", "-p", str(_policy(tmp_path)), "--source", str(run), "--json", str(out), *FAST,
        "--", sys.executable, TRAINER, str(run), "--steps", "400", "--bad-at", "8",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"following TensorBoard run {run} (created after the watch began)" in proc.stdout
    stopped = json.loads(out.read_text())["stopped"]
    assert (stopped["rule"], stopped["step"], stopped["value"]) == ("tb/loss-bounded", 8, 5.0)


def test_watch_reads_an_event_file_path_and_a_run_dir_as_tensorboard(tmp_path: Path) -> None:
    """An event file named on the command line was read as JSONL ("not valid JSON", exit
    2); a run directory reported "0 metrics". Both are the TensorBoard run `check` reads."""
    run = tmp_path / "exp"
    _train(run, "--steps", "6", "--bad-at", "3")
    event_file = next(run.glob("events.out.tfevents.*"))
    for source in (event_file, run):
        proc = gatekeeper("watch", str(source), "-p", str(_policy(tmp_path)), *FAST[:4])
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "x = 5 > 2 at step 3" in proc.stdout
        assert "1 event file(s) written before the watch began are read too" in proc.stdout


@pytest.mark.parametrize("prefix", ["", "tensorboard://"])
def test_run_follows_only_the_version_the_command_creates(tmp_path: Path, prefix: str) -> None:
    """`lightning_logs/version_0` holds an old broken run. With the prefix, Lightning's
    logger writes `version_1`, which goes NaN: FAIL on version_1 (was exit 0 "gate PASSED:
    version_0"). Without it, a healthy re-run into `version_1`: PASS (was killed at 0.0 s).
    Then `check` of the log dir names both runs and asks for one (exit 2, one line)."""
    logs, out = tmp_path / "lightning_logs", tmp_path / "v.json"
    _train(logs / "version_0", "--steps", "5", "--bad-at", "2")
    if prefix:  # the logger picks the next free version_N itself
        trainer = [str(logs), "--lightning", "--nan-at", "5", "--steps", "200"]
    else:
        trainer = [str(logs / "version_1"), "--steps", "30"]
    proc = gatekeeper(
        "run", "-p", str(_policy(tmp_path)), "--source", f"{prefix}{logs}", "--json", str(out),
        *FAST, "--", sys.executable, TRAINER, *trainer,
    )
    err = proc.stdout + proc.stderr
    assert "1 earlier run(s) there are not followed: version_0" in err, err
    assert f"following TensorBoard run version_1 (created in {logs} after the watch began)" in err
    verdict = json.loads(out.read_text())
    assert verdict["run"]["name"] == "version_1"
    if prefix:
        assert proc.returncode == 1, err
        assert verdict["stopped"]["step"] == 5 and "NaN" in proc.stdout
    else:
        assert proc.returncode == 0, err
        assert "gate PASSED: version_1" in proc.stdout
    check = gatekeeper("check", str(logs), "-p", str(_policy(tmp_path)))
    assert check.returncode == 2
    assert check.stderr.strip().splitlines() == [
        f"gatekeeper: error: {logs}: a TensorBoard log dir of 2 run(s): version_0, version_1; "
        f"gatekeeper judges one run: pass its directory, e.g. {logs / 'version_1'}"
    ]


def test_the_hparams_subdirectory_of_a_new_run_is_part_of_it(tmp_path: Path) -> None:
    """torch's `add_hparams` (as transformers' TensorBoardCallback calls it) writes a
    `<time>` subdirectory of event files into the run: a watch of the log dir follows the
    run, never that subdirectory of hparams only."""
    from torch.utils.tensorboard import SummaryWriter

    from gatekeeper.sources.tensorboard.logdir import new_run, runs_in

    w = SummaryWriter(str(tmp_path / "runs" / "Dec04_host"))
    w.add_hparams({"lr": 0.1}, {})
    w.add_scalar("train/loss", 1.0, 0)
    w.close()
    assert len(runs_in(str(tmp_path / "runs"))) == 2
    assert new_run(str(tmp_path / "runs"), frozenset()) == "Dec04_host"


def test_the_followed_new_run_survives_a_cursor_round_trip(tmp_path: Path) -> None:
    """In process: the waiting poll judges nothing of `version_0`; once `version_1` appears
    it alone is read, and a restored source keeps following it from where it was."""
    from torch.utils.tensorboard import SummaryWriter

    from gatekeeper.live.detect import DetectingSource

    def write(version: str, value: float) -> None:
        w = SummaryWriter(str(tmp_path / "ll" / version))
        w.add_scalar("train/loss", value, 0)
        w.close()

    write("version_0", 9.0)
    said: list[str] = []
    source = DetectingSource(str(tmp_path / "ll"), said.append)
    assert source.poll().series == {} and "not followed: version_0" in said[0]
    write("version_1", 0.5)
    assert source.poll().series["train/loss"].values.tolist() == [0.5]
    restored = DetectingSource(str(tmp_path / "ll"), said.append)
    restored.restore(json.loads(json.dumps(source.cursor())))
    assert restored.tb_run == str(tmp_path / "ll" / "version_1")
    assert restored.poll().points == 0  # nothing read twice
    write("version_1", 0.25)  # a restart's second file in the same run directory
    assert restored.poll().series["train/loss"].values.tolist() == [0.25]
