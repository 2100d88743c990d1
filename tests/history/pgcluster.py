"""A throwaway PostgreSQL cluster: Debian's `postgresql` server (initdb/pg_ctl under
/usr/lib/postgresql/*/bin) in a temp dir on a free 127.0.0.1 port, fsync off, stopped
and removed on exit. PostgreSQL refuses to run as root, so as root it runs as `nobody`.
Used by the tests' `pg_server` fixture (conftest.py) and by bench/bench_fleet.py."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "nobody", "--", *cmd] if os.geteuid() == 0 else cmd


def run(*cmd: str) -> None:
    subprocess.run(_as_server_user(list(cmd)), check=True, capture_output=True, timeout=120)


@contextmanager
def cluster(*settings: str) -> Iterator[str]:
    """Base URL (no database) of a running cluster; `settings`: more `-c NAME=VALUE`
    server options. RuntimeError when the server binaries are absent."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries absent (/usr/lib/postgresql/*/bin)")
    root = tempfile.mkdtemp(prefix="gk-pg-")
    os.chmod(root, 0o755)
    data, sock = os.path.join(root, "data"), os.path.join(root, "sock")
    os.mkdir(sock)
    if os.geteuid() == 0:
        shutil.chown(root, "nobody")
        shutil.chown(sock, "nobody")
    port = _free_port()
    run(f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync")
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    opts += "".join(f" -c {s}" for s in settings)
    run(f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l", os.path.join(root, "log"), "-w", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        run(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
