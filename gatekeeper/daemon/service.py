"""The daemon assembled from its parts: state, notifier channels, scheduler, HTTP.

`Daemon(config)` opens the state (a corrupt file raises StateError here, before any
poll), loads every target's policies, builds the channels (missing secrets raise
ConfigError), and `serve()` runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from gatekeeper import dburl
from gatekeeper.daemon import payload as run_state
from gatekeeper.daemon.config import DaemonConfig
from gatekeeper.daemon.discovery import Lister, lister
from gatekeeper.daemon.exporter import DaemonMetrics, MetricView, RunView
from gatekeeper.daemon.http import Api, HttpServer
from gatekeeper.daemon.lease import replica_name
from gatekeeper.daemon.lock import WriterLock
from gatekeeper.daemon.scheduler import PollScheduler
from gatekeeper.daemon.state import RuleRow, RunRecord
from gatekeeper.daemon.stores import open_state
from gatekeeper.daemon.watch import ChannelRule, RunWatcher, Watched, _default_name
from gatekeeper.errors import StateError
from gatekeeper.notify import Channel, ChannelHooks, build_notifier
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.sources import open_live_source
from gatekeeper.sources.base import LiveSource

log = logging.getLogger("gatekeeper.daemon")


# The daemon follows a run as `watch` does: one opener for both.
default_open_source: Callable[[str], LiveSource] = open_live_source


def fingerprint(policies: list[PolicySpec]) -> str:
    """Identifies a policy set and the state layout: a stored judging state is reused only
    under the same policies' canonical content and the same `run_state.STATE_VERSION`."""
    content = json.dumps(
        {"state_version": run_state.STATE_VERSION, "policies": canonical(policies)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def canonical(value: Any) -> Any:
    """A policy set as plain data: dataclasses and check models by field, enums by value;
    what has no fields of its own (a parsed expression) by its repr."""
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if not isinstance(value, float) or math.isfinite(value) else repr(value)
    if isinstance(value, BaseModel):
        return {
            "__kind": getattr(value, "kind", type(value).__name__),
            **canonical(value.model_dump(mode="json")),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [canonical(v) for v in value]
    return repr(value)


def load_targets(
    config: DaemonConfig, open_source: Callable[[str], LiveSource]
) -> list[tuple[Watched, Lister]]:
    channels = [
        ChannelRule(n.name, frozenset(n.statuses), n.repeat_interval) for n in config.notifiers
    ]
    cache: dict[tuple[str, ...], list[PolicySpec]] = {}
    out = []
    for i, t in enumerate(config.targets):
        paths = tuple(t.policies)
        if paths not in cache:
            cache[paths] = load_policies(list(paths))
        policies = cache[paths]
        watched = Watched(
            target=t.name or f"targets[{i}]",
            policies=policies,
            fingerprint=fingerprint(policies),
            tags=tuple(t.tags),
            interval=t.interval or config.poll.interval,
            debounce=config.poll.debounce,
            channels=channels,
            checkpoint=config.poll.checkpoint,
            open_source=open_source,
        )
        if 0 < watched.checkpoint < 2 * watched.interval:
            log.warning(
                "target %s: poll.checkpoint (%gs) is under twice its poll interval (%gs): a "
                "run's period is half to all of the checkpoint, so runs whose period is "
                "shorter than the interval have every poll committed",
                watched.target,
                watched.checkpoint,
                watched.interval,
            )
        out.append((watched, lister(t)))
    return out


def restore_states(records: dict[str, RunRecord], watched: list[Watched], path: str) -> None:
    """Rebuild every stored judging state against its target's policies now, so a state
    that does not fit is refused before any poll (StateError naming the run)."""
    by_target = {w.target: w for w in watched}
    for key, rec in records.items():
        w = by_target.get(rec.target)
        if rec.state is not None and w is not None and rec.fingerprint == w.fingerprint:
            rec.evaluation = run_state.restore(w.policies, rec.state, path, key)


class Daemon:
    def __init__(
        self,
        config: DaemonConfig,
        open_source: Callable[[str], LiveSource] | None = None,
        *,
        reset_state: tuple[str, ...] = (),
    ):
        """`reset_state`: runs whose judging state is dropped first (`serve --reset-state
        RUN`): re-read from their source, their alert state kept."""
        self.config = config
        targets = load_targets(config, open_source or default_open_source)
        self._closed = False
        self.lock = _writer_lock(config.state)
        try:
            self._build(config, targets, reset_state)
        except BaseException:
            store = getattr(self, "store", None)
            if store is not None:
                store.close()
            if self.lock is not None:
                self.lock.release()
            raise

    def _build(
        self,
        config: DaemonConfig,
        targets: list[tuple[Watched, Lister]],
        reset_state: tuple[str, ...],
    ) -> None:
        self.store = open_state(config.state)
        for key in reset_state:
            if not self.store.reset_run(key):
                raise StateError(f"state {self.store.path} has no run {key} to reset")
            log.warning("run %s: judging state reset; it is re-read from its source", key)
        self.replica = replica_name()
        self.leases = self.store.lease_as(self.replica, config.poll.lease)
        # replicas read a run's record when they take it; the one writer reads all now
        records = self.store.load_runs() if self.leases is None else {}
        restore_states(records, [w for w, _ in targets], self.store.path)
        self.registry = CollectorRegistry()
        self.metrics = DaemonMetrics(self.registry, self._views, config.metrics,
                                     self.replica if self.leases is not None else None)
        self.channels = {n.name: self._channel(n) for n in config.notifiers}
        self.metrics.prime(self.channels)
        self.scheduler = PollScheduler(
            config.poll, targets, self.store, self.metrics, self._offer, records, self.leases
        )
        http = config.http
        self.http = HttpServer(
            self._api(),
            http.address,
            http.port,
            workers=http.workers,
            request_timeout=http.request_timeout,
            max_connections=http.max_connections,
        )

    def _channel(self, n: Any) -> Channel:
        hooks = ChannelHooks(
            mark=lambda ids, outcome, detail: self.store.mark_alerts(
                ids, outcome, time.time(), detail
            ),
            count=self.metrics.count_notification,
            retried=self.metrics.count_retry,
        )
        return Channel(
            build_notifier(n),
            hooks,
            queue_size=n.queue_size,
            group_wait=n.group_wait,
            retry_for=n.retry_for,
            retry_backoff=n.retry_backoff,
            retry_backoff_max=n.retry_backoff_max,
        )

    def _offer(
        self, alert_id: int, channel: str, payload: dict[str, Any], created: float | None = None
    ) -> None:
        ch = self.channels.get(channel)
        if ch is None:
            self.store.mark_alerts([alert_id], "dropped", time.time(), "channel not configured")
            return
        ch.offer(alert_id, payload, created)

    # ---- views for the exporter and the API ---------------------------------------------
    def _views(self) -> list[RunView]:
        watchers = self.scheduler.snapshot()
        names = [w.name for w in watchers]
        return [
            RunView(
                name=w.name if names.count(w.name) == 1 else w.key,
                status=w.status,
                last_success=w.last_success,
                ended=w.ended,
                rules=tuple(w.rules.values()),  # RuleRows: policy, rule, severity, status
                metrics=tuple(MetricView(m, step, value) for m, step, value in w.latest()),
                held=w.held_polls,
            )
            for w in watchers
        ]

    def _holder(self, w: RunWatcher) -> str | None:
        """The replica polling a run: this one on a shared store; none once it ended."""
        return self.replica if self.leases is not None and not w.ended else None

    def _runs(self) -> list[dict[str, Any]]:
        """The runs this daemon polls or saw end; on a shared store also every run that
        ended under any replica, before a restart too (`replica` null: polled by none)."""
        rows = [{**w.summary(), "replica": self._holder(w)} for w in self.scheduler.snapshot()]
        if self.leases is None:
            return rows
        try:
            ended = self.leases.ended()
        except Exception as exc:  # the store is away: what this replica holds
            log.warning("listing the runs that ended failed: %s", exc)
            return rows
        seen = {r["key"] for r in rows}
        return rows + [_ended_row(e) for e in ended if e["key"] not in seen]

    def _find(self, ident: str) -> dict[str, Any] | None:
        for w in self.scheduler.snapshot():
            if ident in (w.key, w.name):
                return {
                    **w.summary(),
                    "replica": self._holder(w),
                    "verdict": w.current_verdict(),
                    "rules": _rules(w.rules.values()),
                }
        return self._find_ended(ident) if self.leases is not None else None

    def _find_ended(self, ident: str) -> dict[str, Any] | None:
        """A run that ended under another replica (or before a restart), as committed."""
        assert self.leases is not None
        found = self.leases.ended(ident)
        rec = self.store.load_run(found[0]["key"]) if found else None
        if rec is None:
            return None
        return {**_ended_row(found[0]), "verdict": rec.verdict, "rules": _rules(rec.rules.values())}

    def _api(self) -> Api:
        return Api(
            registry=self.registry,
            metrics_app=self.metrics.wsgi_app(),
            healthy=lambda: self.scheduler.running,
            ready=lambda: self.scheduler.discovered.is_set() and self.store.reachable(),
            runs=self._runs,
            run=self._find,
            alerts=lambda: self.store.alert_log(),
            token=self.config.http.token(),
        )

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        for ch in self.channels.values():
            ch.start()
        # Committed before a stop or crash, not yet delivered: their retry horizon goes on.
        # A replica delivers its own and those of replicas that are gone, never another's.
        if self.leases is not None:
            self.leases.cycle()  # seen alive first, so its claim below is its due
            pending = self.leases.claim_alerts(mine=True)
        else:
            pending = self.store.pending_alerts()
        for alert_id, channel, payload, created in pending:
            self._offer(alert_id, channel, payload, created)
        self.scheduler.start()
        self.http.start()
        log.info("serving on http://%s:%d", self.config.http.address, self.http.port)

    def stop(self) -> None:
        """Stop everything; a second call does nothing. A part that fails to stop (a bug)
        keeps none of the others running: the rest still stops, the leases go back, the
        store is closed and its lock released, and the first failure is raised then."""
        if self._closed:
            return
        self._closed = True
        log.info("stopping: polls end, then the channels and the HTTP server")
        failed: list[Exception] = []

        def part(what: str, stop: Callable[[], object]) -> None:
            try:
                stop()
            except Exception as exc:
                log.exception("stopping %s failed", what)
                failed.append(exc)

        part("the HTTP server", self.http.stop)
        part("the polls", self.scheduler.stop)
        for ch in self.channels.values():
            part(f"channel {ch.name}", ch.stop)
        left = {ch.name: ch.waiting() for ch in self.channels.values() if ch.waiting()}
        if self.leases is not None:
            try:
                self.leases.leave()  # the others take its runs now, not after expiry
            except Exception as exc:
                log.warning("leases: handing them back failed (they expire): %s", exc)
        part("the state store", self.store.close)
        if self.lock is not None:
            part("the state file's lock", self.lock.release)
        _log_stopped(left)
        if failed:
            raise failed[0]

    def serve(self) -> None:
        """Run until SIGTERM or SIGINT; a second one while stopping changes nothing."""
        wakeup = _Wakeup((signal.SIGTERM, signal.SIGINT))
        self.start()
        try:
            log.info("%s received", signal.Signals(wakeup.wait()).name)
        finally:
            self.stop()


class _Wakeup:
    """Signals that wake `wait()`, through `signal.set_wakeup_fd`: CPython's own C-level
    handler writes the signal's number to a pipe the main thread reads, from whichever
    thread the kernel gave the signal to, and the Python-level handler does nothing.
    Two waits of another kind hung the daemon: a handler that set a threading.Event
    took the Event's lock again when a second SIGTERM came while the first's handler
    held it; and a signal given to another thread than the main one (a process-directed
    signal may go to any thread; seen right after a SIGCONT) never interrupted the main
    thread's wait, so no handler ran."""

    def __init__(self, signals: Iterable[int]):
        self._signals = frozenset(signals)
        # Left open for the process's life: a late signal must not write to a reused fd.
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in self._signals:
            signal.signal(sig, _noted)

    def wait(self) -> int:
        """The first of the signals to come (blocks until one does)."""
        while True:
            got = os.read(self._read, 1)[0]
            if got in self._signals:
                return got


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler: the signal was written to the wakeup pipe already."""


def _writer_lock(state: str) -> WriterLock | None:
    """The SQLite state's one-writer lock, taken before the file is opened; PostgreSQL
    is shared by replicas (each run leased by one, see lease.py)."""
    url = dburl.parse(state)
    return WriterLock.take(url.path) if url.engine == "sqlite" else None


def _log_stopped(left: dict[str, int]) -> None:
    """The daemon's last line: what it leaves undelivered (pending, offered at next start)."""
    kept = ", ".join(f"{n} on {name}" for name, n in left.items())
    if kept:
        log.info("stopped; undelivered alerts stay pending for the next start: %s", kept)
    else:
        log.info("stopped; no alert left undelivered")


def _ended_row(e: dict[str, Any]) -> dict[str, Any]:
    """A run that ended, as `RunWatcher.summary` shows one, from `Leases.ended`."""
    return {**e, "name": e["name"] or _default_name(e["key"]),
            "status": e["status"] or "pending", "ended": True, "errors": 0,
            "last_error": None, "hung": False, "replica": None, "held_polls": 0}  # fmt: skip


def _rules(rows: Iterable[RuleRow]) -> list[dict[str, Any]]:
    return [
        {
            "policy": r.policy,
            "rule": r.rule,
            "severity": r.severity,
            "status": r.status,
            "since": r.since,
            "candidate": r.candidate,
            "message": r.message,
        }
        for r in rows
    ]
