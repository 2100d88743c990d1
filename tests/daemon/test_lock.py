"""One writer per store: the `state:` value is a URL, and a second `gatekeeper serve` on
the same SQLite file refuses to start, naming the daemon that holds it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gatekeeper.daemon.config import load_config
from gatekeeper.errors import ConfigError
from tests.daemon.harness import DaemonProcess, write_config
from tests.helpers import REPO


def serve(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", "serve", "-c", str(config), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_daemon_on_the_same_file_refuses_naming_the_holder(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = DaemonProcess(config).start()
    try:
        assert first.proc is not None
        second = serve(config)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr  # one line, naming the holder and the way out
        assert "gatekeeper.db is in use by another gatekeeper serve" in lines[0]
        assert f"pid {first.proc.pid} on host {socket.gethostname()} since 20" in lines[0]
        assert "gatekeeper.db.lock" in lines[0] and "PostgreSQL" in lines[0]
        assert first.get("/readyz").status_code == 200  # the holder is untouched
    finally:
        first.stop()


def test_a_daemon_killed_with_9_does_not_block_the_next_one(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = DaemonProcess(config).start()
    first.kill9()
    lock = tmp_path / "state" / "gatekeeper.db.lock"
    assert json.loads(lock.read_text())["pid"] == first.proc.pid  # type: ignore[union-attr]
    second = DaemonProcess(config).start()  # the kernel dropped the flock with the process
    try:
        assert json.loads(lock.read_text())["pid"] == second.proc.pid  # type: ignore[union-attr]
    finally:
        second.stop()


def test_check_config_reads_the_state_while_the_daemon_runs(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    daemon = DaemonProcess(config).start()
    try:
        checked = serve(config, "--check-config")
        assert checked.returncode == 0, checked.stderr
        assert "gatekeeper.db: ok" in checked.stdout
    finally:
        daemon.stop()


def _config(tmp_path: Path, state: str) -> Path:
    path = write_config(tmp_path)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "state": state}, indent=2))
    return path


def test_state_urls_name_a_file_or_an_engine_never_a_folder_named_after_the_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEKEEPER_STATE", raising=False)
    absolute = tmp_path / "abs" / "s.db"
    assert load_config(str(_config(tmp_path, f"sqlite://{absolute}"))).state == str(absolute)
    relative = load_config(str(_config(tmp_path, "sqlite:rel/s.db"))).state
    assert relative == str(tmp_path / "rel" / "s.db")  # relative to the config file
    url = "postgresql://gk:secret@db.example:5432/gatekeeper"
    assert load_config(str(_config(tmp_path, url))).state == url
    with pytest.raises(ConfigError, match=r"gatekeeper.yaml:\d+: state: .*unknown store scheme"):
        load_config(str(_config(tmp_path, "mysql://gk@db/gatekeeper")))
    monkeypatch.setenv("GATEKEEPER_STATE", "redis://cache:6379")
    with pytest.raises(ConfigError, match="GATEKEEPER_STATE: .*unknown store scheme 'redis'"):
        load_config(str(_config(tmp_path, "s.db")))
    assert not list(tmp_path.rglob("postgresql:")) and not list(tmp_path.rglob("mysql:"))


def test_a_symlink_to_the_file_is_the_same_lock(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    first = DaemonProcess(config).start()
    try:
        (tmp_path / "alias.db").symlink_to(tmp_path / "state" / "gatekeeper.db")
        other = _config(tmp_path, str(tmp_path / "alias.db"))
        second = serve(other)
        assert second.returncode == 2 and "in use by another gatekeeper serve" in second.stderr
    finally:
        first.stop()
