"""The throwaway PostgreSQL cluster of the history tests, for the state-store contract
and the replica tests (one fixture, tests/history/conftest.py)."""

from tests.history.conftest import pg_server, pg_url  # noqa: F401 (fixtures)
