"""The daemon's state store a state URL names: the embedded SQLite file (`state.py`) or
PostgreSQL shared by replicas (`state_postgres.py`), the URL parsed by `gatekeeper/dburl.py`.
A module of its own so that neither store imports the other."""

from __future__ import annotations

from gatekeeper import dburl
from gatekeeper.daemon.state import SqlState, StateStore


def open_state(url: str) -> SqlState:
    """The store a state URL names (gatekeeper/dburl.py): PostgreSQL for `postgresql://`,
    else the SQLite file."""
    found = dburl.parse(url)
    if found.engine == "sqlite":
        return StateStore(found.path)
    from gatekeeper.daemon.state_postgres import PostgresState  # psycopg: gatekeeper[postgres]

    return PostgresState(found.url)
