"""Poll scheduling: one queue of runs by due time, dispatched by one thread.

The dispatcher sleeps until the next poll is due (or a run is added), takes the runs
whose poll is due from a `DueQueue` and hands each to the poll workers (`poll.workers`
threads); there is no scheduler job per run. Polls never overlap for one run (one still
queued or running is not dispatched again: that due time is skipped), missed polls
coalesce into one, and a jitter spreads the load. Each poll's source I/O runs on a
separate pool under a timeout: a poll that hangs is abandoned (counted, backed off) and
its run is not polled again until the hung call returns, so one slow or failing source
never stalls the others. A discovery job re-expands the globs to add new runs; runs
whose source says they ended get a final verdict and are retired. Discovery and the
lease cycle are APScheduler jobs; pausing that scheduler pauses the dispatch too.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor as PollPool
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_PAUSED

from gatekeeper.daemon.config import PollSettings
from gatekeeper.daemon.discovery import Lister
from gatekeeper.daemon.due import DueQueue
from gatekeeper.daemon.exporter import DaemonMetrics
from gatekeeper.daemon.lease import LeaseLost, Leases
from gatekeeper.daemon.state import RunRecord, SqlState
from gatekeeper.daemon.watch import RunWatcher, Watched
from gatekeeper.errors import RecordError

log = logging.getLogger("gatekeeper.daemon")
DISCOVERY_JOB = "__discovery__"
LEASE_JOB = "__leases__"
CONTROL = "control"  # the executor of discovery and the lease cycle
# The dispatcher wakes when the next poll is due, at most this often (the polls due
# within it go together) and at least this rarely (a paused scheduler, an empty queue).
TICK_MIN, TICK_MAX = 0.01, 1.0
PAUSED_WAIT = 0.1  # how often a paused scheduler is looked at again
FLUSH_SECONDS = 15.0  # a stop's commits of held polls (poll.checkpoint), at most
Offer = Callable[[int, str, dict[str, Any]], None]


class PollScheduler:
    """Owns the watchers, the queue of their due polls and the threads that poll them."""

    def __init__(
        self,
        settings: PollSettings,
        targets: list[tuple[Watched, Lister]],
        store: SqlState,
        metrics: DaemonMetrics,
        offer: Offer,
        records: dict[str, RunRecord],
        leases: Leases | None = None,
    ):
        self.settings = settings
        self.targets = targets
        self.store = store
        self.metrics = metrics
        self.offer = offer
        self.records = records
        self.leases = leases  # replicas on a shared store: poll only the runs leased here
        self.leased: set[str] = set()
        self._rebalancing = threading.Lock()
        self.watchers: dict[str, RunWatcher] = {}
        self.lock = threading.Lock()
        self.discovered = threading.Event()  # first discovery done: ready
        # Room for hung calls on top of the workers; a hung call holds a thread until it returns.
        self.pool = PollPool(max_workers=settings.workers * 4, thread_name_prefix="poll")
        self.workers = PollPool(max_workers=settings.workers, thread_name_prefix="poll-worker")
        self.due = DueQueue(settings.jitter)
        self._dispatched: set[str] = set()  # queued or running on the workers
        self._dispatch_lock = threading.Lock()
        self.scheduler = BackgroundScheduler(
            # discovery and the lease cycle have threads of their own: queued behind a
            # backlog of polls, a replica's leases expired and it dropped its own runs
            executors={CONTROL: ThreadPoolExecutor(2)},
            job_defaults={"max_instances": 1, "coalesce": True},
            timezone="UTC",
        )
        self._stopping = False
        self._stopping_lock = threading.Lock()
        self._wake = threading.Event()  # a run added (maybe due before the next wake), a stop
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="poll-dispatch", daemon=True
        )

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.scheduler.start()
        self._dispatcher.start()
        self.scheduler.add_job(
            self.discover,
            "interval",
            seconds=self.settings.discovery_interval,
            id=DISCOVERY_JOB,
            next_run_time=datetime.now().astimezone(),
            max_instances=1,
            executor=CONTROL,
        )
        if self.leases is not None:
            self.scheduler.add_job(
                self.rebalance,
                "interval",
                seconds=self.leases.ttl / 3,
                id=LEASE_JOB,
                max_instances=1,
                coalesce=True,
                executor=CONTROL,
            )

    def stop(self) -> None:
        # Nothing is dispatched or added once stopping; the polls in flight end (a backlog
        # queued on the workers is dropped), then the held polls are committed.
        with self._stopping_lock:
            self._stopping = True
        self._wake.set()
        if self._dispatcher.is_alive():
            self._dispatcher.join(5 * TICK_MAX)  # it waits at most TICK_MAX, then hands out
        self.scheduler.shutdown(wait=True)
        self.workers.shutdown(wait=True, cancel_futures=True)  # the polls in flight end
        self.pool.shutdown(wait=False, cancel_futures=True)
        self._flush_all()

    def _flush_all(self) -> None:
        """Commit the polls held in memory (poll.checkpoint) before the leases go back,
        for at most FLUSH_SECONDS (inside a pod's 30 s grace period): the runs left are
        read again from their committed cursor by whoever polls them next."""
        held = [w for w in self.snapshot() if w.held is not None]
        if not held:
            return
        log.info("committing the polls %d runs hold in memory", len(held))
        until = time.monotonic() + FLUSH_SECONDS
        for i, watcher in enumerate(held):
            if time.monotonic() > until:
                log.warning(
                    "stopping: %d runs' held polls not committed within %gs: they are read "
                    "again from their committed cursor",
                    len(held) - i,
                    FLUSH_SECONDS,
                )
                return
            self._flush(watcher)

    def _flush(self, watcher: RunWatcher) -> None:
        try:
            watcher.flush(time.time())
        except Exception as exc:  # lost to another replica or the store is away: it is
            # read again from the committed cursor by whoever polls it next
            log.warning("run %s: committing its held poll failed: %s", watcher.key, exc)
            self.metrics.poll_errors.labels(kind="checkpoint").inc()

    @property
    def running(self) -> bool:
        """Whether polls are dispatched and the control jobs run (`/healthz`)."""
        return self.scheduler.running and self._dispatcher.is_alive()

    def scheduled(self, key: str) -> bool:
        """Whether the run's polls are still due (not retired, dropped or handed back)."""
        return key in self.due

    def snapshot(self) -> list[RunWatcher]:
        with self.lock:
            return list(self.watchers.values())

    # ---- discovery ----------------------------------------------------------------------
    def discover(self) -> None:
        """Add a job for every run a target covers that is not yet watched."""
        for watched, list_runs in self.targets:
            try:
                keys = list_runs()
            except Exception as exc:  # a listing that fails is retried next discovery
                log.warning("target %s: discovery failed: %s", watched.target, exc)
                self.metrics.poll_errors.labels(kind="discovery").inc()
                continue
            if self.leases is None:
                for key in keys:
                    self._watch(key, watched)
                continue
            try:
                self.leases.offer(watched.target, keys)
            except Exception as exc:  # the store is away: retried next discovery
                log.warning("target %s: recording its runs failed: %s", watched.target, exc)
                self.metrics.poll_errors.labels(kind="discovery").inc()
        if self.leases is not None:
            self.rebalance()
        self.discovered.set()

    # ---- replicas -----------------------------------------------------------------------
    def rebalance(self) -> None:
        """Renew this replica's leases, take its share, stop what it lost or hands back,
        and deliver the pending alerts of replicas that are gone."""
        with self._rebalancing:  # run by the lease job and after each discovery
            self._rebalance()

    def _rebalance(self) -> None:
        assert self.leases is not None
        # Taking runs over (a record read and a session built each) stops a third of a
        # lease period in: the leases the cycle renewed would otherwise expire before the
        # next cycle could renew them (a lone replica taking 3,000 runs on 2 busy cores
        # lost its own runs and took them again, over and over). The rest, held and
        # renewed, are taken next cycle.
        until = time.monotonic() + self.leases.ttl / 3
        try:
            cycle = self.leases.cycle()
        except Exception as exc:  # the store is away: the commits are fenced meanwhile
            log.warning("leases: renewing failed: %s", exc)
            self.metrics.poll_errors.labels(kind="lease").inc()
            return
        targets = {w.target: w for w, _ in self.targets}
        # A run still polled here but taken again, not renewed, was held by another
        # replica in between (this one was cut off past its lease, its renewals failing)
        # that may have committed past what this one holds in memory: it is dropped and
        # taken again below, from its committed record.
        again = sorted(cycle.taken & self.leased)
        for key in sorted(self.leased - set(cycle.held)) + again:
            self._unwatch(key)
        for key in cycle.shed:  # still held: what it holds in memory is committed first
            self._unwatch(key, flush=True)
        foreign = [k for k, t in cycle.held.items() if t not in targets]
        self.leases.release(cycle.shed + foreign)
        for key, target in sorted(cycle.held.items()):
            if self._stopping or time.monotonic() > until:
                break
            if key not in self.leased and key not in cycle.shed and target in targets:
                self._take(key, targets[target])
        if set(cycle.held) != self.leased:
            log.info(
                "leases: %d runs held (share %d among %d replicas), %d handed back",
                len(cycle.held),
                cycle.share,
                cycle.replicas,
                len(cycle.shed) + len(foreign),
            )
        for alert_id, channel, payload, _created in self.leases.claim_alerts(mine=False):
            self.offer(alert_id, channel, payload)

    def _take(self, key: str, watched: Watched) -> None:
        """Poll a run just leased, from its committed record. One that cannot be read
        (the store is away, its state is refused) is logged and tried next cycle."""
        try:
            self._watch(key, watched, self.store.load_run(key))
        except Exception as exc:
            log.error("run %s: taking it over failed: %s", key, exc)
            self.metrics.poll_errors.labels(kind="lease").inc()
            return
        self.leased.add(key)

    def _unwatch(self, key: str, flush: bool = False) -> None:
        """Stop polling a run (its lease is lost or handed back), after a poll in flight;
        `flush`: still leased here, its held poll is committed first."""
        self.leased.discard(key)
        with self.lock:
            watcher = self.watchers.pop(key, None)
        if watcher is None:
            return
        self.due.discard(key)
        with watcher.polling:  # wait for a poll in flight; none starts after this
            if flush:
                self._flush(watcher)
        log.info("run %s: no longer polled by this replica", key)

    def _watch(self, key: str, watched: Watched, fresh: RunRecord | None = None) -> None:
        """Poll a run; `fresh`: its record read just now (a replica taking it over)."""
        with self.lock:
            if key in self.watchers:
                return
            record = fresh if self.leases is not None else self.records.pop(key, None)
            watcher = RunWatcher(key, watched, self.store, record)
            self.watchers[key] = watcher
        if watcher.ended:
            return  # judged whole before a restart: shown, not polled
        self.metrics.watched.inc()
        interval = watched.interval
        first = time.time() + random.uniform(0, min(interval, 5))
        with self._stopping_lock:  # nothing is added once stopping
            if self._stopping:
                return
            self.due.add(key, first, interval)
        self._wake.set()

    # ---- dispatch -----------------------------------------------------------------------
    def _dispatch_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before looking: a run added from here on wakes it
            nxt = self.due.next_due()
            wait = TICK_MAX if nxt is None else nxt - time.time()
            if self.scheduler.state == STATE_PAUSED:
                wait = PAUSED_WAIT
            self._wake.wait(min(TICK_MAX, max(TICK_MIN, wait)))
            if self._stopping or self.scheduler.state == STATE_PAUSED:
                continue
            try:
                self.tick()
            except Exception:  # a bug: logged, the loop goes on (a dead one fails /healthz)
                log.exception("dispatching the polls due failed")

    def tick(self) -> None:
        """Hand the polls due now to the workers. A run whose last poll is still queued
        or running is not dispatched again: that due time passes, counted as an overrun."""
        due = self.due.pop_due(time.time())
        with self._dispatch_lock:
            if self._stopping:
                return
            ready = [(k, at) for k, at in due if k not in self._dispatched]
            self._dispatched.update(k for k, _ in ready)
        if len(ready) < len(due):  # still polling them: behind, or a slow source
            self.metrics.polls.labels(outcome="overrun").inc(len(due) - len(ready))
        for key, at in ready:
            try:
                self.workers.submit(self._dispatch, key, at)
            except RuntimeError:  # the workers are shut down: stopping
                return

    def _dispatch(self, key: str, due: float) -> None:
        self.metrics.poll_lag.observe(max(0.0, time.time() - due))
        try:
            self.poll(key)
        except Exception:  # a bug: logged, the run is polled again when next due
            log.exception("run %s: the poll failed", key)
        finally:
            with self._dispatch_lock:
                self._dispatched.discard(key)

    # ---- one poll -----------------------------------------------------------------------
    def poll(self, key: str) -> None:
        watcher = self.watchers.get(key)
        if watcher is None or self._stopping:  # stopping: a backlog of polls is dropped
            return
        with watcher.polling:
            if self.watchers.get(key) is watcher:  # not dropped meanwhile (_unwatch)
                self._poll_one(key, watcher)

    def _poll_one(self, key: str, watcher: RunWatcher) -> None:
        started = time.time()
        if started < watcher.next_allowed:
            self.metrics.polls.labels(outcome="skipped").inc()
            return  # backing off after errors
        if watcher.in_flight is not None and not watcher.in_flight.done():
            # Still hung: not polled again, but a failed poll all the same, so a run
            # stuck for good turns `error` and alerts after poll.error_after of them.
            self._failed(watcher, "timeout", "poll timed out and is still hung")
            return
        watcher.in_flight = None
        with self.metrics.poll_duration.time():
            self._poll(watcher, started)
        if watcher.ended:
            self._retire(watcher)

    def _poll(self, watcher: RunWatcher, started: float) -> None:
        future = self.pool.submit(watcher.fetch)
        try:
            poll = future.result(timeout=self.settings.timeout)
        except FutureTimeout:
            watcher.in_flight = future
            self._failed(watcher, "timeout", f"poll timed out after {self.settings.timeout:g}s")
            return
        except Exception as exc:  # any source failure: count, back off, keep the loop going
            self._failed(watcher, "error", f"{type(exc).__name__}: {exc}", exc)
            return
        try:
            alerts = watcher.apply(poll, time.time())
        except LeaseLost as exc:  # another replica holds it now: nothing was committed
            log.warning("%s", exc)
            self.metrics.poll_errors.labels(kind="lease").inc()
            self._unwatch(watcher.key)
            return
        except Exception as exc:
            log.exception("run %s: evaluating or committing the poll failed", watcher.key)
            self._failed(watcher, "error", f"{type(exc).__name__}: {exc}", exc)
            return
        self.metrics.points.inc(poll.points)
        self.metrics.polls.labels(outcome="ok").inc()
        for alert_id, channel, payload in alerts:
            self.offer(alert_id, channel, payload)

    def _failed(
        self, watcher: RunWatcher, kind: str, error: str, exc: Exception | None = None
    ) -> None:
        """Count, back off; past `poll.error_after` failures in a row (at once for a
        malformed record, which will not heal) the run is `error` and alerts."""
        log.warning("run %s: %s", watcher.key, error)
        self.metrics.poll_errors.labels(kind=kind).inc()
        self.metrics.polls.labels(outcome="error").inc()
        now = time.time()
        watcher.failed(error, now, self.settings.backoff_max)
        if not isinstance(exc, RecordError) and watcher.errors < self.settings.error_after:
            return
        try:
            alerts = watcher.unreadable(error, now)
        except Exception:
            log.exception("run %s: recording it as unreadable failed", watcher.key)
            return
        for alert_id, channel, payload in alerts:
            self.offer(alert_id, channel, payload)

    def _retire(self, watcher: RunWatcher) -> None:
        log.info("run %s ended (%s): retired", watcher.key, watcher.status)
        if self.leases is not None and watcher.key in self.leased:
            self.leased.discard(watcher.key)
            try:
                self.leases.release([watcher.key])
            except Exception as exc:  # ended is committed: no replica takes it anyway
                log.warning("run %s: releasing its lease failed: %s", watcher.key, exc)
        self.due.discard(watcher.key)
