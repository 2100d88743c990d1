"""TensorBoard's restart rules: which points a restarted writer discards.

The rules of tensorboard 2.21's `event_accumulator.EventAccumulator`
(`_MaybePurgeOrphanedData`), applied to a run's events in the order TensorBoard reads
them — its files in name order (`directory_watcher`), each front to back:

- `file_version` ("brain.Event:N", N read as a float, -1 when it does not parse) is
  remembered from the latest event that has one and picks the rule for every event after.
- N >= 2 (every current writer): a `SessionLog.START` event at step S discards every point
  read before it whose step is >= S, whatever its tag. `SummaryWriter(purge_step=S)` of
  torch and tensorboardX writes one, with `file_version`, at the top of its new file.
- otherwise: an event with a summary whose step is below the most recent step discards
  the earlier points of *its own tags* at steps >= its step; any other event becomes the
  most recent step.

A live source cannot take back what it delivered, so `Restarts.settle` says when a rule
discarded a point an earlier poll delivered, or when a point that stays comes at a step
below one delivered (a whole read merges it among them by step): the caller then reads
the run again whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatekeeper.sources.base import StepTops


@dataclass(frozen=True)
class EventInfo:
    """What the restart rules read of one protobuf-decoded event."""

    step: int
    version: str | None  # file_version, when the event holds one
    start: bool  # a SessionLog.START
    tags: tuple[str, ...] | None  # its summary's value tags; None: no summary


def is_v2(file_version: str) -> bool:
    """event_util.ParseFileVersion, then the accumulator's `version and version >= 2`."""
    try:
        version = float(file_version.split("brain.Event:")[-1])
    except ValueError:
        version = -1.0
    return bool(version) and version >= 2


@dataclass
class Restarts:
    """The rules' state across polls (saved in the cursor) and this poll's discards."""

    v2: bool = False  # the latest file_version is >= 2
    recent: int = -1  # the accumulator's most_recent_step (the rule without file_version)
    # The rules looked at the order of events (a START, or the rule without file_version):
    # a file that grows before another one already read changes what is discarded.
    ordered: bool = False
    delivered: StepTops = field(default_factory=StepTops)  # tag -> highest step delivered
    _all: list[tuple[int, int]] = field(default_factory=list)  # (record, step): every tag
    _tag: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    # ---- reading events, in order ---------------------------------------------------------
    def headless(self) -> None:
        """A file opens without `file_version` >= 2: its first events take the rule of the
        files before it, so the order in which files are read matters."""
        self.ordered = True

    def event(self, record: int, info: EventInfo) -> None:
        """One protobuf-decoded event (record number across the poll's files)."""
        if info.version is not None:
            self.v2 = is_v2(info.version)
        if self.v2:
            if info.start:
                self._all.append((record, info.step))
                self.ordered = True
            return
        self.ordered = True
        if info.tags is not None and info.step < self.recent:
            for tag in info.tags:
                self._by_tag(tag, np.array([record]), np.array([info.step]))
        else:
            self.recent = info.step

    def scalars(
        self, records: np.ndarray, steps: np.ndarray, tags: np.ndarray, names: list[str]
    ) -> None:
        """A run of one-scalar events (the fast path's), in record order, between two
        protobuf-decoded ones. Under file_version >= 2 they change nothing; otherwise each
        has a summary, so the most recent step is the running maximum."""
        if self.v2 or not records.size:
            return
        self.ordered = True
        before = np.maximum.accumulate(np.concatenate([[self.recent], steps]))[:-1]
        late = steps < before
        self.recent = max(self.recent, int(steps.max()))
        for k in np.unique(tags[late]).tolist():
            mine = late & (tags == k)
            self._by_tag(names[k], records[mine], steps[mine])

    def _by_tag(self, tag: str, records: np.ndarray, steps: np.ndarray) -> None:
        self._tag.setdefault(tag, []).append((records.astype(np.int64), steps.astype(np.int64)))

    # ---- after a poll's events ------------------------------------------------------------
    def settle(self, chunks: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]) -> bool:
        """Drop the discarded points from this poll's `chunks` (tag -> (record, step, value)
        arrays) and note what is delivered. False when a discard reaches a point an
        earlier poll delivered, or a point that stays lands below one (a step logged
        again without a restart: a whole read sorts it among them, a poll would have
        judged it after them): nothing is changed then, and the run must be read again."""
        if self._reaches_delivered():
            return False
        kept: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        for tag, parts in chunks.items():
            records, steps = self._triggers(tag)
            if records.size:
                parts = [_keep(part, records, steps) for part in parts]
            if mine := [part for part in parts if part[0].size]:
                kept[tag] = mine
        if any(self.delivered.reaches_below(tag, min(int(p[1].min()) for p in parts))
               for tag, parts in kept.items()):
            return False
        chunks.clear()
        chunks.update(kept)
        for tag, parts in kept.items():
            self.delivered.raise_to(tag, max(int(part[1].max()) for part in parts))
        self._all, self._tag = [], {}
        return True

    def _reaches_delivered(self) -> bool:
        delivered = self.delivered.top
        if self._all and delivered:
            if min(s for _, s in self._all) <= max(delivered.values()):
                return True
        for tag, parts in self._tag.items():
            top = delivered.get(tag)
            if top is not None and min(int(p[1].min()) for p in parts) <= top:
                return True
        return False

    def _triggers(self, tag: str) -> tuple[np.ndarray, np.ndarray]:
        """(record, step) of every discard that applies to `tag`, by record."""
        parts = [(np.array([r for r, _ in self._all], np.int64),
                  np.array([s for _, s in self._all], np.int64))]
        parts += self._tag.get(tag, [])
        records = np.concatenate([p[0] for p in parts])
        steps = np.concatenate([p[1] for p in parts])
        order = np.argsort(records, kind="stable")
        return records[order], steps[order]

    # ---- cursor ---------------------------------------------------------------------------
    def to_cursor(self) -> dict[str, Any]:
        return {"v2": self.v2, "recent": self.recent, "ordered": self.ordered,
                "delivered": self.delivered.to_json()}

    @classmethod
    def from_cursor(cls, data: dict[str, Any]) -> Restarts:
        return cls(
            v2=bool(data["v2"]),
            recent=int(data["recent"]),
            ordered=bool(data["ordered"]),
            delivered=StepTops(data["delivered"]),
        )


def _keep(
    part: tuple[np.ndarray, np.ndarray, np.ndarray], records: np.ndarray, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points of `part` no later discard reaches: a discard at record r, step s takes
    the points before r at steps >= s, so a point survives when its step is below the
    smallest step of the discards after it."""
    index, point_steps, values = part
    lowest_after = np.minimum.accumulate(steps[::-1])[::-1]
    j = np.searchsorted(records, index, side="right")
    later = j < records.size
    floor = lowest_after[np.minimum(j, records.size - 1)]
    keep = ~(later & (floor <= point_steps))
    return index[keep], point_steps[keep], values[keep]
