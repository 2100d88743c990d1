"""The runs a daemon polls, by when each one's next poll is due.

One heap for every run, popped by the scheduler's dispatcher: a run's poll is dispatched
without a scheduler job of its own (APScheduler's per-job loop, job store and events
cost 0.12-0.27 ms a poll, bench/bench_dispatch.py). The timing is what an APScheduler
interval job with `coalesce` gives: each next poll one interval after the last one due
(plus a random jitter), polls missed while the process was busy coalesced into one.
Removal is lazy: an entry that no longer matches its run's due time is skipped when it
comes up. Thread-safe.
"""

from __future__ import annotations

import heapq
import random
import threading


class DueQueue:
    def __init__(self, jitter: float = 0.0):
        self.jitter = jitter  # seconds: each next due time is later by uniform(0, jitter)
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, tuple[float, float]] = {}  # key -> (due time, interval)
        self._lock = threading.Lock()

    def add(self, key: str, due: float, interval: float) -> None:
        """Poll `key` at `due` (a time.time()), then every `interval` seconds."""
        with self._lock:
            self._due[key] = (due, interval)
            heapq.heappush(self._heap, (due, key))

    def discard(self, key: str) -> None:
        """Poll `key` no more (a poll of it already taken from the queue still runs)."""
        with self._lock:
            self._due.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._due

    def __len__(self) -> int:
        return len(self._due)

    def next_due(self) -> float | None:
        """When the next poll is due (maybe earlier: a removed run's entry), or None."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[str, float]]:
        """The runs whose poll is due at `now`, each with the time it was due, oldest
        first; each is due again one interval later, past `now` (the ones missed are
        coalesced into this one)."""
        out: list[tuple[str, float]] = []
        with self._lock:
            heap, entries = self._heap, self._due
            while heap and heap[0][0] <= now:
                due, key = heapq.heappop(heap)
                entry = entries.get(key)
                if entry is None or entry[0] != due:
                    continue  # removed, or re-added at another time
                out.append((key, due))
                interval = entry[1]
                nxt = due + interval
                if nxt <= now:  # missed: coalesced into the one due now
                    nxt += interval * ((now - nxt) // interval + 1)
                if self.jitter > 0:
                    nxt += random.uniform(0, self.jitter)
                entries[key] = (nxt, interval)
                heapq.heappush(heap, (nxt, key))
            if len(heap) > 2 * len(entries) + 64:  # removed runs' entries: compact
                self._heap = [(d, k) for k, (d, _) in entries.items()]
                heapq.heapify(self._heap)
        return out
