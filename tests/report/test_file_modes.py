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
