"""The source contract: a source only reads, and turns one run's metrics into a `Run`.

A source is opened from a SOURCE string (a path, or `scheme://...`). `read()` returns the
whole run as it is now; live sources additionally implement incremental polling (see the
live-gating modules). Third-party errors are translated here into `SourceError`s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gatekeeper.model import Run, RunState, set_dotted


@dataclass(frozen=True)
class RunOverrides:
    """Metadata given on the command line; applied over what the source says."""

    name: str | None = None
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    state: RunState | None = None
    allowed_states: dict[str, str] = field(default_factory=dict)  # state -> reason

    def apply(self, run: Run) -> Run:
        if self.name:
            run.name = self.name
        if self.tags:
            run.tags = tuple(dict.fromkeys((*run.tags, *self.tags)))
        for key, value in self.config.items():
            set_dotted(run.config, key, value)
        if self.state is not None:
            run.state = self.state
        run.allowed_states = {**run.allowed_states, **self.allowed_states}
        return run


class Source(ABC):
    """Reads one run. Subclasses register a `kind` and say which SOURCE strings they open."""

    kind: ClassVar[str]

    def __init__(self, spec: str):
        self.spec = spec

    @classmethod
    @abstractmethod
    def accepts(cls, spec: str) -> bool:
        """True when this source kind understands `spec` (cheap: no network, no parsing)."""

    @abstractmethod
    def read(self) -> Run:
        """The whole run as it is now. Raises SourceError when it cannot be read whole."""


@dataclass
class Poll:
    """What one poll of a live source found: only the points new since the last poll."""

    series: dict[str, Any]  # metric -> Series of new points (sorted by step)
    run: Run  # current metadata (name, tags, config, state); its `series` may be empty
    ended: bool = False  # the run has ended: end marker, a final state, or gone for good
    points: int = 0  # how many new points this poll read


class LiveSource(Source):
    """A source that can be followed while the run is written: each poll costs O(new data).

    The cursor is a JSON-serializable position (byte offsets, counts, page tokens) so a
    daemon can persist it and resume after a restart without re-reading history.
    """

    @abstractmethod
    def poll(self) -> Poll:
        """Read what is new since the last poll. A source that does not exist yet, or a
        partial trailing record, is not an error: the poll returns nothing new."""

    @abstractmethod
    def cursor(self) -> dict[str, Any]:
        """The current read position, JSON-serializable."""

    @abstractmethod
    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a position `cursor()` returned earlier."""
