"""A throwaway PostgreSQL cluster for the store contract suite, and a store per backend.

The cluster is Debian's `postgresql` server (initdb/pg_ctl under /usr/lib/postgresql/*/bin),
started once per session in a temp dir on a free 127.0.0.1 port and stopped afterwards.
PostgreSQL refuses to run as root, so as root it runs as `nobody`.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from gatekeeper.history import HistoryStore, open_store

_db_names = itertools.count()


def _pg_bin() -> str | None:
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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Base URL (no database) of a running throwaway cluster."""
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries absent (/usr/lib/postgresql/*/bin); "
            "apt-get install postgresql"
        )
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
    run(f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l", os.path.join(root, "log"), "-w", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        run(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A fresh, empty database on the session cluster."""
    import psycopg

    name = f"t{next(_db_names)}"
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{pg_server}/{name}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[HistoryStore]:
    with open_store(store_url) as s:
        yield s
