"""`gatekeeper run -- CMD` and `gatekeeper watch` end to end: the real CLI in a child
process, a real stand-in trainer (tests/live/writer.py) writing real files, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import gatekeeper, write_policy

WRITER = str(Path(__file__).with_name("writer.py"))
FAST = ("--interval", "0.1", "--progress-every", "1")


def _policy(tmp: Path, extra: str = "", for_: int = 1) -> Path:
    return write_policy(
        tmp / "live.yaml",
        f"""
        version: 1
        name: live
        rules:
          - id: kl-zero
            metric: train/ppo_kl
            check: {{abs_max: 1.0e-6}}
            for: {for_}
        {extra}
        """,
    )


def _run(
    tmp: Path, policy: Path, *writer_args: str, grace: str = "5"
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    record = tmp / "m.jsonl"
    proc = gatekeeper(
        "run",
        "-p",
        str(policy),
        "--source",
        str(record),
        "--grace",
        grace,
        "--json",
        str(tmp / "v.json"),
        *FAST,
        "--",
        sys.executable,
        WRITER,
        str(record),
        *writer_args,
    )
    verdict = json.loads((tmp / "v.json").read_text())
    return proc, verdict


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if '"train/step"' in line)


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_bad_point_mid_run_stops_the_command_and_exits_1_naming_the_rule(tmp_path: Path) -> None:
    proc, verdict = _run(
        tmp_path, _policy(tmp_path), "--steps", "400", "--delay", "0.02", "--bad-at", "10"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "live/kl-zero" in proc.stdout
    stopped = verdict["stopped"]
    assert stopped["rule"] == "live/kl-zero" and stopped["step"] == 10 and stopped["value"] == 0.5
    assert stopped["signals"] == ["SIGTERM"] and stopped["exit_code"] == 128 + signal.SIGTERM
    assert "violation at train/step 10" in proc.stdout and "run stopped at train/step" in proc.stdout
    assert stopped["last_step"] >= 10 and stopped["last_step_key"] == "train/step"
    assert _rows(tmp_path / "m.jsonl") < 400  # killed before it burnt the rest of its budget


def test_command_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    proc, verdict = _run(
        tmp_path,
        _policy(tmp_path),
        "--steps",
        "400",
        "--delay",
        "0.02",
        "--bad-at",
        "3",
        "--ignore-term",
        grace="1",
    )
    assert proc.returncode == 1, proc.stderr
    # CMD alone first, then the group, then SIGKILL
    assert verdict["stopped"]["signals"] == ["SIGTERM", "SIGTERM", "SIGKILL"]
    assert verdict["stopped"]["signal_targets"] == ["CMD", "group", "group"]
    assert verdict["stopped"]["exit_code"] == 128 + signal.SIGKILL


def test_grandchildren_in_the_group_are_gone(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    proc, _ = _run(
        tmp_path,
        _policy(tmp_path),
        "--steps",
        "400",
        "--delay",
        "0.02",
        "--bad-at",
        "5",
        "--grandchild",
        str(pidfile),
    )
    assert proc.returncode == 1, proc.stderr
    grandchild = int(pidfile.read_text())
    assert _gone(grandchild)


def test_healthy_command_exit_code_passes_through(tmp_path: Path) -> None:
    proc, verdict = _run(
        tmp_path, _policy(tmp_path), "--steps", "15", "--delay", "0.01", "--exit", "3"
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert verdict["status"] == "pass" and verdict["final"] and verdict["stopped"] is None
    # the last line says why a passing gate exits 3: CMD's own status
    lines = proc.stdout.splitlines()
    assert any(x.startswith("gate PASSED, but CMD exited 3: ") for x in lines), proc.stdout
    proc, _ = _run(tmp_path, _policy(tmp_path), "--steps", "15", "--delay", "0.01")
    assert proc.returncode == 0
    assert "CMD" not in proc.stdout


def test_a_command_killed_by_a_signal_is_named_whatever_the_verdict(tmp_path: Path) -> None:
    """A real child: a small script writes its JSONL run, then SIGKILLs itself. A passing
    gate exits 137 saying so; a gate failing at the end (a required step never logged, so
    the live gate cannot stop it first) exits 1, CMD's end on the same line."""
    script = tmp_path / "train.py"
    script.write_text(
        "import json, os, signal, sys\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    for i in range(5):\n"
        "        f.write(json.dumps({'train/step': i, 'train/ppo_kl': 0.0}) + '\\n')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    required = """
          - id: reaches-step-100
            metric: train/ppo_kl
            steps: [100]
            check: {abs_max: 1.0e-6}
    """
    for extra, code, line in (
        ("", 137, "gate PASSED, but CMD was killed by SIGKILL (137): "),
        (required, 1, "  CMD was killed by SIGKILL (137)"),  # a detail line of -q
    ):
        record = tmp_path / f"m{code}.jsonl"
        proc = gatekeeper(
            "run", "-q", "-p", str(_policy(tmp_path, extra)), "--source", str(record),
            "--json", str(tmp_path / "v.json"), *FAST, "--", sys.executable, str(script),
            str(record),
        )
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert line in proc.stdout.splitlines()[-1], proc.stdout
        run = json.loads((tmp_path / "v.json").read_text())["run"]
        assert run["command_exit_code"] == 137 and run["command_signal"] == "SIGKILL"


def test_command_that_succeeds_but_fails_the_final_verdict_exits_1(tmp_path: Path) -> None:
    extra = """
          - id: reaches-step-100
            metric: train/ppo_kl
            steps: [100]
            check: {abs_max: 1.0e-6}
    """
    proc, verdict = _run(tmp_path, _policy(tmp_path, extra), "--steps", "10", "--delay", "0.01")
    assert proc.returncode == 1, proc.stdout
    failing = [r["rule"] for r in verdict["results"] if r["status"] == "error"]
    assert failing == ["reaches-step-100"]


def test_writer_that_stops_writing_trips_stale(tmp_path: Path) -> None:
    extra = """
          - id: loss-fresh
            metric: train/loss
            check: {stale: {max_seconds: 1}}
    """
    proc, verdict = _run(
        tmp_path,
        _policy(tmp_path, extra),
        "--steps",
        "50",
        "--delay",
        "0.02",
        "--hang-after",
        "4",
        grace="1",
    )
    assert proc.returncode == 1, proc.stdout
    assert verdict["stopped"]["rule"] == "live/loss-fresh"
    stale = next(r for r in verdict["results"] if r["rule"] == "loss-fresh")
    assert stale["status"] == "fail" and stale["value"] > 1 and stale["step"] == 4


def test_for_3_ignores_two_bad_points_and_fires_on_the_third(tmp_path: Path) -> None:
    policy = _policy(tmp_path, for_=3)
    two = ("--steps", "20", "--delay", "0.01", "--bad-at", "5", "--bad-at", "6", "--bad-at", "9")
    proc, verdict = _run(tmp_path, policy, *two)
    assert proc.returncode == 0, proc.stdout
    assert verdict["results"][0]["violations"] == 3
    (tmp_path / "m.jsonl").unlink()
    three = ("--steps", "400", "--delay", "0.02", "--bad-at", "5", "--bad-at", "6", "--bad-at", "7")
    proc, verdict = _run(tmp_path, policy, *three)
    assert proc.returncode == 1
    assert verdict["stopped"]["step"] == 7


def test_partial_last_line_mid_write_is_no_error(tmp_path: Path) -> None:
    proc, verdict = _run(
        tmp_path, _policy(tmp_path), "--steps", "25", "--delay", "0.03", "--split-lines"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdict["results"][0]["judged"] == 25  # every row, none half-read or lost


def test_sigint_to_gatekeeper_is_forwarded_to_the_command_group(tmp_path: Path) -> None:
    record = tmp_path / "m.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "gatekeeper",
        "run",
        "-p",
        str(_policy(tmp_path)),
        "--source",
        str(record),
        "--json",
        str(tmp_path / "v.json"),
        *FAST,
        "--",
        sys.executable,
        WRITER,
        str(record),
        "--steps",
        "2000",
        "--delay",
        "0.02",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (record.exists() and _rows(record) >= 5) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, out + err  # CMD's own status passes through
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert "SIGINT" in verdict["stopped"]["reason"]
    assert _rows(record) < 2000


def test_run_with_miles_record_dir_watches_the_rewritten_record(tmp_path: Path) -> None:
    out_dir = tmp_path / "records"
    proc = gatekeeper(
        "run",
        "-p",
        str(_policy(tmp_path)),
        "--miles",
        "--source",
        str(out_dir),
        *FAST,
        "--json",
        str(tmp_path / "v.json"),
        "--",
        sys.executable,
        WRITER,
        "--miles",
        "--steps",
        "300",
        "--delay",
        "0.02",
        "--bad-at",
        "6",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["stopped"]["step"] == 6
    # gatekeeper writes nothing there; the writer, stopped between writing its next
    # record and renaming it over the last (a loaded machine), leaves its temp file
    assert set(os.listdir(out_dir)) - {".metrics.jsonl.tmp"} == {"metrics.jsonl"}


def test_watch_waits_for_the_source_and_ends_at_the_end_marker(tmp_path: Path) -> None:
    record = tmp_path / "later" / "m.jsonl"
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gatekeeper",
            "watch",
            str(record),
            "-p",
            str(_policy(tmp_path)),
            "--junit",
            str(tmp_path / "j.xml"),
            "-v",  # the table, whose rows say how many points were judged
            *FAST,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)  # gatekeeper starts first; the trainer creates the file later
    record.parent.mkdir()
    subprocess.run(
        [sys.executable, WRITER, str(record), "--steps", "10", "--delay", "0.01", "--end"],
        check=True,
    )
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, out + err
    assert "10 points" in out or "judged" in out
    assert (tmp_path / "j.xml").exists()


def test_watch_exits_1_at_the_first_failure_and_idle_timeout_ends_a_quiet_run(
    tmp_path: Path,
) -> None:
    record = tmp_path / "m.jsonl"
    subprocess.run(
        [sys.executable, WRITER, str(record), "--steps", "8", "--delay", "0", "--bad-at", "4"],
        check=True,
    )
    proc = gatekeeper("watch", str(record), "-p", str(_policy(tmp_path)), *FAST)
    assert proc.returncode == 1 and "live/kl-zero" in proc.stdout
    good = tmp_path / "good.jsonl"
    subprocess.run([sys.executable, WRITER, str(good), "--steps", "8", "--delay", "0"], check=True)
    proc = gatekeeper(
        "watch", str(good), "-p", str(_policy(tmp_path)), "--idle-timeout", "0.5", *FAST
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--idle-timeout" in proc.stdout


def test_a_live_run_where_nothing_is_ever_judged_ends_nothing_judged_exit_5(
    tmp_path: Path,
) -> None:
    nightly = write_policy(
        tmp_path / "nightly.yaml",
        """
        version: 1
        name: nightly
        match: {tags: [nightly]}
        rules:
          - {id: kl-zero, metric: train/ppo_kl, check: {abs_max: 1.0e-6}}
        """,
    )
    record = tmp_path / "m.jsonl"
    watch = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "watch", str(record), "-p", str(nightly),
         "--json", str(tmp_path / "v.json"), *FAST],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    subprocess.run(
        [sys.executable, WRITER, str(record), "--steps", "10", "--delay", "0.05", "--end"],
        check=True,
    )
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 5, out + err
    assert "gate NOTHING JUDGED: " in out and "applies to runs tagged nightly" in out
    assert json.loads((tmp_path / "v.json").read_text())["status"] == "nothing_judged"
    # `run`: CMD exits 0 and nothing was judged: 5; CMD's own failure comes first
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    proc, verdict = _run(tmp_path / "a", nightly, "--steps", "5", "--delay", "0")
    assert proc.returncode == 5 and verdict["status"] == "nothing_judged", proc.stdout
    proc, verdict = _run(tmp_path / "b", nightly, "--steps", "5", "--delay", "0", "--exit", "3")
    assert proc.returncode == 3 and verdict["status"] == "nothing_judged", proc.stdout
    proc = gatekeeper(
        "run", "-p", str(nightly), "--source", str(tmp_path / "r.jsonl"), *FAST,
        "--allow-nothing-judged", "nightly policy on a PR", "--",
        sys.executable, WRITER, str(tmp_path / "r.jsonl"), "--steps", "3", "--delay", "0",
    )
    assert proc.returncode == 0 and "allowed: nightly policy on a PR" in proc.stdout


FAMILY_WRITER = str(Path(__file__).parents[1] / "sources" / "family_writer.py")
LOSS_POLICY = """
version: 1
name: p
rules:
  - {id: loss, metric: train/loss, check: {max: 2.0}}
"""


def _earlier_run(tmp: Path, *args: str) -> Path:
    """m.jsonl holding a finished earlier run (steps 0..9), and the loss policy."""
    record = tmp / "m.jsonl"
    subprocess.run([sys.executable, FAMILY_WRITER, "jsonl", str(record), "--stop", "10", *args],
                   check=True)
    return write_policy(tmp / "p.yaml", LOSS_POLICY)


def _failing(verdict: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(r["rule"], r["step"]) for r in verdict["results"] if r["status"] == "fail"]


def test_run_resuming_into_a_file_judges_it_from_the_append_on_as_check_does(
    tmp_path: Path,
) -> None:
    """The earlier run is healthy; the resume appends steps 10..29 with a bad step 20:
    nothing is judged before the append, then the whole file is: the verdict check gives."""
    policy = _earlier_run(tmp_path)
    record = tmp_path / "m.jsonl"
    proc = gatekeeper(
        "run", "-p", str(policy), "--source", str(record), "--json", str(tmp_path / "r.json"),
        *FAST, "--", sys.executable, FAMILY_WRITER, "jsonl", str(record), "--start", "10",
        "--stop", "300", "--bad-at", "20", "--resume", "r", "--delay", "0.02",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "waiting for the command to write" in out
    assert "appended to by the command after the watch began (a resume)" in out
    check = gatekeeper("check", str(record), "-p", str(policy), "--json",
                       str(tmp_path / "c.json"))
    by_run = json.loads((tmp_path / "r.json").read_text())
    by_check = json.loads((tmp_path / "c.json").read_text())
    assert check.returncode == 1
    assert _failing(by_run) == _failing(by_check)
    assert [step for _, step in _failing(by_run)] == [20]
    # the earlier run's end marker is not the resumed run's end: CMD is stopped at step 20
    assert by_run["stopped"]["step"] == 20 and by_run["stopped"]["last_step"] < 299


def test_watch_judges_a_file_already_there_at_once(tmp_path: Path) -> None:
    """`watch` (no command) follows what is there: the earlier run's bad step 3 fails it."""
    policy = _earlier_run(tmp_path, "--bad-at", "3")
    proc = gatekeeper("watch", str(tmp_path / "m.jsonl"), "-p", str(policy), *FAST,
                      "--json", str(tmp_path / "w.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "waiting for the command" not in proc.stdout + proc.stderr
    verdict = json.loads((tmp_path / "w.json").read_text())
    assert [step for _, step in _failing(verdict)] == [3]


def test_a_report_path_that_cannot_be_written_stops_run_and_watch_before_they_begin(
    tmp_path: Path,
) -> None:
    """The path is tried before CMD starts (and before `watch` waits): an unwritable
    `--json` was found only when the report was written, after the whole training run."""
    (tmp_path / "a-file").write_text("a file where a folder would go")
    bad = str(tmp_path / "a-file" / "v.json")
    started = tmp_path / "started"
    policy = _policy(tmp_path)
    run = gatekeeper("run", "-p", str(policy), "--source", str(tmp_path / "m.jsonl"),
                     "--junit", bad, "--", "touch", str(started))  # fmt: skip
    watch = gatekeeper("watch", str(tmp_path / "m.jsonl"), "-p", str(policy),
                       "--html", bad, "--idle-timeout", "60")  # fmt: skip
    for proc in (run, watch):
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip() == f"gatekeeper: error: {bad}: cannot write the report " \
                                      "there: Not a directory; name a writable file"
    assert not started.exists()  # CMD never ran
    assert sorted(os.listdir(tmp_path)) == ["a-file", "live.yaml"]


def test_an_unwritable_step_summary_stops_run_before_the_command(tmp_path: Path) -> None:
    """Under GitHub Actions the summary is appended to when the verdict is in: a
    `$GITHUB_STEP_SUMMARY` that cannot be written was exit 2 after CMD had run."""
    (tmp_path / "a-file").write_text("a file where a folder would go")
    summary = str(tmp_path / "a-file" / "summary.md")
    started = tmp_path / "started"
    proc = gatekeeper("run", "-p", str(_policy(tmp_path)), "--source", str(tmp_path / "m.jsonl"),
                      "--github", "always", "--", "touch", str(started),
                      env={"GITHUB_STEP_SUMMARY": summary})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{summary}: cannot write the step summary ($GITHUB_STEP_SUMMARY): Not a " \
           "directory" in proc.stdout + proc.stderr
    assert not started.exists()
