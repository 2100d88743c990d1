"""Store URLs, shared by the history store and the daemon's state: which engine a URL
names, the SQLite path in it, how it is shown (password hidden) and how PostgreSQL is
connected to.

Accepted: `postgresql://...` / `postgres://...`; `sqlite:///abs/path.db` (three slashes
and an absolute path), `sqlite:rel/path.db`; a bare path (SQLite). Any other
`scheme://` is refused, never taken as a file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from gatekeeper.errors import StateError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class StoreUrl:
    engine: Literal["sqlite", "postgresql"]
    url: str  # as given (a PostgreSQL URL keeps its password: never log this)
    path: str  # the SQLite file; empty for PostgreSQL

    @property
    def shown(self) -> str:
        return self.path if self.engine == "sqlite" else redact(self.url)


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def sqlite_path(url: str) -> str:
    if url.startswith("sqlite:///"):
        return url[len("sqlite://") :]
    if url.startswith("sqlite:"):
        return url[len("sqlite:") :]
    return url


def parse(value: str) -> StoreUrl:
    """The store a URL names; ValueError (saying what is accepted) for anything else."""
    if is_postgres(value):
        if not value.split("://", 1)[1].strip("/"):
            raise ValueError(f"{redact(value)}: no host or database after the scheme")
        return StoreUrl("postgresql", value, "")
    scheme = _SCHEME.match(value)
    if scheme and scheme.group(1).lower() not in ("sqlite",) and len(scheme.group(1)) > 1:
        # (one letter is a Windows drive, C:\...)
        raise ValueError(
            f"{redact(value)}: unknown store scheme {scheme.group(1)!r}; use "
            "postgresql://USER@HOST:PORT/DB, sqlite:///ABS/PATH.db or a file path"
        )
    if value.lower().startswith("sqlite://") and not value.startswith("sqlite:///"):
        raise ValueError(f"{value!r}: a SQLite URL names no host; use sqlite:///ABS/PATH.db, "
                         "sqlite:rel/path.db or a path")  # sqlite://x.db was the file /x.db
    path = sqlite_path(value)
    if not path:
        raise ValueError(f"{value!r}: no file path; use sqlite:///path/to/file.db or a path")
    return StoreUrl("sqlite", value, path)


def redact(url: str) -> str:
    """A store URL with any password replaced, fit for logs and reports."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


# TCP keepalives: a connection whose peer went quiet (a server gone, a network cut with
# the socket still open) fails within ~30 s, not after the kernel's two hours.
KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}

# A history store's session bounds, where the server, the role or the URL leave them
# unbounded (0): a read or write that waits on another session's lock (a migration, an
# operator's transaction) fails after `lock_timeout` naming the store, instead of a CI job
# that hangs until its own timeout; no statement and no open transaction lasts for ever.
# A bound the URL (`?options=-c%20lock_timeout%3D5s`) or the role sets is kept.
HISTORY_BOUNDS = {
    "statement_timeout": "5min",
    "lock_timeout": "30s",
    "idle_in_transaction_session_timeout": "1min",
}


def connect_postgres(
    url: str, what: str, *, bounds: dict[str, str] | None = None, **options: Any
) -> Any:
    """A psycopg connection (autocommit unless `options` say otherwise: transactions are
    explicit), its session given `bounds` where unbounded; a failure is a StateError
    naming `what` and the redacted URL, never echoing a password."""
    from gatekeeper.extras import load

    psycopg = load("psycopg", "postgres", f"a PostgreSQL {what}")
    try:
        conn = psycopg.connect(url, **{"connect_timeout": 10, "autocommit": True, **options})
    except psycopg.Error as exc:
        raise StateError(f"{what} {redact(url)}: cannot connect: {first_line(exc)}") from None
    try:
        if bounds:
            bound_session(conn, bounds)
    except psycopg.Error as exc:
        conn.close()
        why = first_line(exc)
        raise StateError(f"{what} {redact(url)}: setting up the session: {why}") from None
    return conn


def bound_session(conn: Any, bounds: dict[str, str]) -> None:
    """Set each of `bounds` (a setting and its value) that is 0 in this session, for the
    session. Two round trips; settings any role may make."""
    rows = conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(bounds),)
    ).fetchall()
    unset = sorted(name for name, setting in rows if setting == "0")
    if unset:
        calls = ", ".join("set_config(%s, %s, false)" for _ in unset)
        conn.execute(f"SELECT {calls}", [x for name in unset for x in (name, bounds[name])])
    if not conn.autocommit:  # set_config of a transaction rolled back would be undone
        conn.commit()


def first_line(exc: BaseException) -> str:
    """An engine error's first line, redacted (psycopg's message can echo the conninfo)."""
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__)
