"""The one exception hierarchy of gatekeeper.

GatekeeperError                 base; the CLI maps every subclass to exit code 2
├── UsageError                  bad command-line arguments or option values
├── PolicyError                 a policy file is invalid (names file:line and field)
├── SourceError                 a run source cannot be read
│   ├── SourceNotFound          the path or run does not exist (yet)
│   ├── RecordError             a record is malformed (names file:line and what was found)
│   └── SourceUnavailable       a remote source failed after bounded retries
├── ConfigError                 a daemon/history configuration is invalid
└── StateError                  persisted state (daemon state, history store) is unusable

A failing gate is not an exception: it is a Verdict whose status is FAIL.
"""

from __future__ import annotations


class GatekeeperError(Exception):
    """Base of every error gatekeeper raises on purpose."""

    exit_code = 2


class UsageError(GatekeeperError):
    """A command-line argument or option value is wrong."""


class PolicyError(GatekeeperError):
    """A policy file is invalid. The message names file:line and the field."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")


class SourceError(GatekeeperError):
    """A run source cannot be read."""


class SourceNotFound(SourceError):
    """The source path or remote run does not exist (yet)."""


class RecordError(SourceError):
    """A metric record is malformed. The message names file:line and what was found."""

    def __init__(self, message: str, *, file: str, line: int | None = None):
        self.file = file
        self.line = line
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")


class SourceUnavailable(SourceError):
    """A remote source kept failing after bounded retries."""


class ConfigError(GatekeeperError):
    """A configuration file (daemon, history) is invalid."""


class StateError(GatekeeperError):
    """Persisted state is corrupt or of an unknown version; never silently reset."""
