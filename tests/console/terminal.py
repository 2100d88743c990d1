"""The CLI as a person and as a CI log see it: a child process on a pseudo-terminal of a
given width (its size set on the pty itself, as a terminal emulator does), or with its
output in a pipe. Both start from the environment a user has, less the variables that
would decide colour or GitHub output behind the test's back."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.helpers import REPO

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def environment(columns: int, no_color: bool, extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NO_COLOR", "FORCE_COLOR", "GATEKEEPER_CONFIG")
           and not k.startswith("GITHUB_")}
    env.update(COLUMNS=str(columns), PYTHONPATH=str(REPO))
    if no_color:
        env["NO_COLOR"] = "1"
    env.update(extra or {})
    return env


def on_a_terminal(*args: str, columns: int = 80, no_color: bool = False,
                  cwd: Path = REPO, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """`gatekeeper ARGS` with stdin, stdout and stderr on a pty `columns` wide: its exit
    code and what the terminal received (line ends as written, ANSI kept)."""
    import fcntl
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "gatekeeper", *args], cwd=cwd,
                            env=environment(columns, no_color, env),
                            stdin=child, stdout=child, stderr=child)
    os.close(child)
    chunks = []
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(timeout=60), b"".join(chunks).decode().replace("\r\n", "\n")


def in_a_pipe(*args: str, columns: int = 80, no_color: bool = False, cwd: Path = REPO,
              env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """`gatekeeper ARGS` with stdout and stderr in one pipe, COLUMNS set as CI sets it."""
    proc = subprocess.run([sys.executable, "-m", "gatekeeper", *args], cwd=cwd,
                          env=environment(columns, no_color, env), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout
