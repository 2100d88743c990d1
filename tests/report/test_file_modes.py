"""Report files are created with the process umask (0666 & ~umask, as a shell redirection
creates a file), still written atomically (issue 29: they were 0600 whatever the umask,
so an artifact uploader or a web server running as another user could not read them)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.helpers import REPO

REPORTS = ("v.json", "j.xml", "r.html")


def _check_under_umask(umask: int, out_dir) -> subprocess.CompletedProcess[str]:
    args = ["check", "examples/runs/healthy", "-p", "policies", "-q", "--json",
            str(out_dir / "v.json"), "--junit", str(out_dir / "j.xml"),
            "--html", str(out_dir / "r.html")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run(
        ["sh", "-c", f'umask {umask:03o} && exec "$0" -m gatekeeper "$@"', sys.executable, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_reports_take_the_process_umask(tmp_path, umask):
    out = _check_under_umask(umask, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in REPORTS:
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode == 0o666 & ~umask, (name, oct(mode))
    assert sorted(os.listdir(tmp_path)) == sorted(REPORTS)  # no temporary file left


def test_rewriting_a_report_replaces_it_whole(tmp_path):
    (tmp_path / "v.json").write_text("stale " * 10_000)
    os.chmod(tmp_path / "v.json", 0o600)
    out = _check_under_umask(0o022, tmp_path)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "v.json").read_text()
    assert text.startswith("{") and "stale" not in text
    assert stat.S_IMODE(os.stat(tmp_path / "v.json").st_mode) == 0o644  # a new file, renamed


def _check(*report: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", "check", "examples/runs/healthy", "-p", "policies",
         "-q", *report], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_report_to_a_pipe_or_dev_stdout_is_written_as_a_stream(tmp_path):
    """`--json /dev/stdout` and a named pipe get the report as a shell redirection would.
    Renamed over, as root, the /dev/stdout link itself was replaced by a regular file (and
    `--json /dev/full` replaced the device); as another user the rename failed, exit 70."""
    out = _check("--json", "/dev/stdout")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('{\n  "status": "pass"'), out.stdout[:200]
    assert os.path.islink("/dev/stdout") and os.readlink("/dev/stdout") == "/proc/self/fd/1"
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    out = _check("--junit", str(fifo))
    assert out.returncode == 0 and reader.communicate(timeout=60)[0].startswith(b"<?xml")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the pipe


@pytest.mark.parametrize(("where", "why"), [
    ("/dev/full", "No space left on device"),
    ("{tmp}", "it is a directory"),
    ("{tmp}/a-file/v.json", "Not a directory"),
    ("{tmp}/nobody.fifo", "No such device or address"),  # a pipe nobody reads: no wait
])
def test_a_report_path_that_cannot_be_written_is_exit_2_naming_it(tmp_path, where, why):
    """Was exit 70 (an OSError from makedirs, open or rename): a bad --json is a usage
    error, one line naming the path and why."""
    path = where.format(tmp=tmp_path)
    (tmp_path / "a-file").write_text("a file where a folder would go")
    if path.endswith(".fifo"):
        os.mkfifo(path)
    out = _check("--json", path)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line == f"gatekeeper: error: {path}: cannot write the report: {why}; name a " \
                   "writable file", line
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # the device is still a device


def test_a_report_path_that_is_a_link_writes_the_report_through_it(tmp_path):
    """A link (`latest.json -> runs/42.json`, or one whose target is not there yet) keeps
    pointing where it did and its target holds the report; renamed over, the link itself
    was replaced by a file."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "41.json").write_text("old")
    os.symlink("runs/41.json", tmp_path / "latest.json")
    os.symlink("runs/42.xml", tmp_path / "latest.xml")  # leads nowhere yet
    out = _check("--json", str(tmp_path / "latest.json"), "--junit", str(tmp_path / "latest.xml"))
    assert out.returncode == 0, out.stderr
    assert os.readlink(tmp_path / "latest.json") == "runs/41.json"
    assert os.readlink(tmp_path / "latest.xml") == "runs/42.xml"
    assert (tmp_path / "runs" / "41.json").read_text().startswith('{\n  "status": "pass"')
    assert (tmp_path / "runs" / "42.xml").read_text().startswith("<?xml")
    assert sorted(os.listdir(tmp_path / "runs")) == ["41.json", "42.xml"]
