"""Run the real daemon as a subprocess and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import REPO

POLICY = """\
version: 1
name: kl
rules:
  - id: kl-small
    metric: train/ppo_kl
    check: {abs_max: 0.1}
  - id: loss-finite
    metric: train/loss
    check: {finite: true}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(
    tmp: Path,
    notifiers: list[dict[str, Any]] | None = None,
    *,
    http: dict[str, Any] | None = None,
    **poll: Any,
) -> Path:
    """A daemon config (JSON is YAML) watching tmp/runs/*.jsonl with the kl policy."""
    (tmp / "runs").mkdir(exist_ok=True)
    (tmp / "kl.yaml").write_text(POLICY)
    config = {
        "state": "state/gatekeeper.db",
        "http": {"port": free_port(), **(http or {})},
        "poll": {"interval": 0.3, "jitter": 0.05, "timeout": 2, "discovery_interval": 0.5, **poll},
        "targets": [{"glob": "runs/*.jsonl", "policies": ["kl.yaml"]}],
        "notifiers": notifiers or [],
    }
    path = tmp / "gatekeeper.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def port_of(config: Path) -> int:
    return int(json.loads(config.read_text())["http"]["port"])


class DaemonProcess:
    def __init__(self, config: Path, env: dict[str, str] | None = None, level: str = "info"):
        self.config = config
        self.level = level
        # A daemon that hangs is sent SIGABRT before SIGKILL: faulthandler writes every
        # thread's stack to its log, which the failure shows.
        self.env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
        self.port = port_of(config)
        self.log = config.parent / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> DaemonProcess:
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gatekeeper",
                "serve",
                "-c",
                str(self.config),
                "--log-level",
                self.level,
            ],
            cwd=REPO,
            env=self.env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
        if wait:
            assert self.wait(lambda: self.get("/readyz").status_code == 200, 20), self.tail()
        return self

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text()[-chars:] if self.log.exists() else ""

    def get(self, path: str) -> httpx.Response:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=5)
        except httpx.HTTPError:
            return httpx.Response(599)

    def api(self, path: str) -> Any:
        resp = self.get(path)
        return resp.json() if resp.status_code == 200 else None

    def run(self, name: str) -> dict[str, Any] | None:
        return self.api(f"/api/runs/{name}")

    def metric(self, name: str) -> float:
        """Sum of every sample of a metric family line that starts with `name`."""
        text = self.get("/metrics").text
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)
        )

    def wait(self, pred: Callable[[], bool], timeout: float = 20.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if pred():
                    return True
            except (TypeError, KeyError, json.JSONDecodeError):
                pass
            if self.proc is not None and self.proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def proc_status(self) -> dict[str, int]:
        """Threads and resident memory (kB) of the daemon process, from /proc."""
        assert self.proc is not None
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {
            "threads": int(fields["Threads"]),
            "rss_kb": int(fields["VmRSS"].split()[0]),
        }

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.abort()
            raise

    def abort(self) -> None:
        """A hung daemon's thread stacks into its log (faulthandler), then SIGKILL."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGABRT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def writer(path: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.daemon.writer", str(path), *args], cwd=REPO
    )
