"""A throwaway PostgreSQL cluster for the store contract suite, and a store per backend.

The cluster (tests/history/pgcluster.py) is started once per session and stopped
afterwards.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from gatekeeper.history import HistoryStore, open_store
from tests.history import pgcluster

_db_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Base URL (no database) of a running throwaway cluster."""
    if pgcluster.pg_bin() is None:
        pytest.skip(
            "PostgreSQL server binaries absent (/usr/lib/postgresql/*/bin); "
            "apt-get install postgresql"
        )
    with pgcluster.cluster() as url:
        yield url


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
