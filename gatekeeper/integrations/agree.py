"""How the ranks of a `torch.distributed` run agree on the step to stop at, without a
collective on a step where nobody stops.

A rank whose gate failed posts a boundary number B (and its rank) under one key of the
process group's own store (the `TCPStore` `init_process_group` creates); every rank checks
that key
at each step boundary and stops at the first boundary >= the posted one. A passing step
costs each rank one key look-up on the store, no collective and no device sync.

Why every rank sees the key in time: the poster writes it before it enters the
collective of step B (DDP's gradient all-reduce), and no rank can finish that collective
before the poster has entered it; so every rank reaching boundary B finds the key. When
several ranks post, the smallest boundary wins (compare-and-set), so a rank never stops
later than one that stopped before it — which is what would leave the others waiting in
a collective forever. The rank named in the key is the one whose gate failed first: it
writes the reports (`owner`), so they say why the run stopped, and only it writes them.

Each gated run in a process group has a key of its own: the store counts each rank's
runs, and every rank starts the same runs, so the n-th run of every rank shares one key
and a second `fit()` in the same group never takes the first one's stop for its own.
"""

from __future__ import annotations

from typing import Any

KEY = "gatekeeper/stop-at"


class StopChannel:
    """`post(boundary)`: this rank stops at `boundary`; `due(boundary)`: stop here."""

    def __init__(self, store: Any, rank: int, key: str = KEY):
        self.store = store
        self.rank = rank
        self.key = key

    @classmethod
    def for_process_group(cls) -> StopChannel | None:
        """The default process group's store; None in a single-process run."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        from torch.distributed import distributed_c10d

        store, rank = distributed_c10d._get_default_store(), dist.get_rank()
        run = store.add(f"{KEY}/runs/{rank}", 1)  # this rank's n-th run: every rank's n-th
        return cls(store, rank, key=f"{KEY}/{run}")

    def post(self, boundary: int) -> None:
        """Ask every rank to stop at `boundary` (or earlier, if one asked for earlier)."""
        want = f"{boundary}:{self.rank}".encode()
        while True:
            current = self.store.get(self.key) if self.store.check([self.key]) else b""
            if current and _parse(current)[0] <= boundary:
                return
            got = self.store.compare_set(self.key, current, want)
            if got == want:
                return

    def due(self, boundary: int) -> bool:
        """True when some rank asked to stop at this boundary or an earlier one."""
        posted = self._posted()
        return posted is not None and posted[0] <= boundary

    def owner(self) -> int | None:
        """The rank whose failure stopped the run (None: nobody posted)."""
        posted = self._posted()
        return None if posted is None else posted[1]

    def _posted(self) -> tuple[int, int] | None:
        if not self.store.check([self.key]):
            return None
        return _parse(self.store.get(self.key))


def _parse(value: bytes) -> tuple[int, int]:
    boundary, rank = value.decode().split(":")
    return int(boundary), int(rank)
