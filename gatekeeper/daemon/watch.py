"""One watched run: poll its live source, evaluate, debounce, decide alerts, commit.

`fetch` does the source I/O (run under a timeout by the scheduler); `apply` folds the
poll into the persisted state in one transaction and returns the alerts to enqueue.
The judging itself is a `session.JudgingSession`, as for `check` and `watch`; a watcher
adds persistence, debounce and alerts. The in-memory session always matches the
committed cursor: a failed fetch changes
nothing, a failed commit drops the in-memory state so it is reloaded from the store (at
once, or before the next fetch when the store cannot be read either).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import InitVar, dataclass, field
from typing import Any

from gatekeeper.daemon import payload
from gatekeeper.daemon.state import AlertState, PollCommit, RuleRow, RunRecord, SqlState
from gatekeeper.daemon.tracking import track
from gatekeeper.engine import Evaluation
from gatekeeper.notify.grouping import ChannelState, alert_payload, decide
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.session import JudgingSession
from gatekeeper.sources.base import LiveSource, Poll
from gatekeeper.verdict import Mode, RuleResult, Severity, Status

log = logging.getLogger("gatekeeper.daemon")

# The daemon's own rule on every run: its source can be read. A run that cannot be read
# is an error that alerts like any rule in ERROR, never a run left pending in silence.
SOURCE_POLICY, SOURCE_RULE = "gatekeeper", "source-readable"
SOURCE_KEY = (SOURCE_POLICY, SOURCE_RULE)


def source_result(status: Status, message: str) -> RuleResult:
    return RuleResult(
        SOURCE_POLICY,
        SOURCE_RULE,
        status,
        Severity.FAIL,
        Mode.ENFORCE,
        metric="",
        message=message[:400],
        source="gatekeeper serve",
        expected="the run's source can be read and parsed",
    )


@dataclass(frozen=True)
class ChannelRule:
    """What a watcher needs of a notifier's config to decide alerts."""

    name: str
    statuses: frozenset[str]
    repeat_interval: float


@dataclass
class Watched:
    """The shared, read-only-per-poll settings of a target."""

    target: str
    policies: list[PolicySpec]
    fingerprint: str
    tags: tuple[str, ...]
    interval: float
    debounce: int
    channels: list[ChannelRule]
    open_source: Callable[[str], LiveSource]


@dataclass
class RunWatcher:
    key: str
    watched: Watched
    store: SqlState
    # the committed record it resumes from: read once, not kept (its parsed state and
    # first verdict, ~125 KB a run, stayed with every watcher after a restart)
    record: InitVar[RunRecord | None] = None
    source: LiveSource | None = None
    cursor: dict[str, Any] | None = None
    session: JudgingSession | None = None
    rules: dict[tuple[str, str], RuleRow] = field(default_factory=dict)
    alerts: dict[tuple[str, str, str], AlertState] = field(default_factory=dict)
    verdict: dict[str, Any] | None = None
    status: str = "pending"
    name: str = ""
    points: int = 0
    ended: bool = False
    errors: int = 0  # consecutive failed polls, drives the backoff
    next_allowed: float = 0.0
    last_success: float | None = None
    last_error: str | None = None
    in_flight: Future[Poll] | None = None  # an abandoned (timed-out) fetch still running
    stale: bool = False  # the in-memory state is ahead of the store: reload before polling
    polling: threading.RLock = field(default_factory=threading.RLock)  # held by a poll
    texts: payload.VerdictText = field(default_factory=payload.VerdictText)

    def __post_init__(self, record: RunRecord | None) -> None:
        self.name = self.name or _default_name(self.key)
        self._load(record)

    def _load(self, rec: RunRecord | None) -> None:
        self.source = None
        evaluation, self.cursor = self._restore(rec), None
        if evaluation is not None:
            assert rec is not None
            self.cursor = rec.cursor
        self.session = JudgingSession(
            self.watched.policies,
            live=True,
            tags=self.watched.tags,
            evaluation=evaluation,
            bounded=True,  # the saved state is bounded by the rules' windows (docs/daemon.md)
        )
        if rec is not None:
            self.rules, self.alerts, self.verdict = dict(rec.rules), dict(rec.alerts), rec.verdict
            self.status, self.points, self.ended = rec.status or "pending", rec.points, rec.ended
            self.last_success = rec.updated
            if rec.verdict:
                self.name = rec.verdict.get("run", {}).get("name") or self.name

    def _restore(self, rec: RunRecord | None) -> Evaluation | None:
        """The committed judging state, or None: the run is (re-)read from its start.
        A state that does not fit its rules is a StateError (payload.restore)."""
        if rec is None or rec.state is None:
            return None
        if rec.fingerprint != self.watched.fingerprint:
            log.warning("run %s: policies changed since the last poll; re-reading it", self.key)
            return None
        if rec.evaluation is not None:  # restored (and so checked) when the daemon started
            return rec.evaluation
        return payload.restore(self.watched.policies, rec.state, self.store.path, self.key)

    # ---- polling ------------------------------------------------------------------------
    def fetch(self) -> Poll:
        """Source I/O only: open (resuming from the committed cursor) and poll."""
        if self.stale:  # a commit failed and the store could not be read back then
            self._load(self.store_record())
            self.stale = False
        if self.source is None:
            source = self.watched.open_source(self.key)
            if self.cursor:
                source.restore(self.cursor)
            self.source = source
        return self.source.poll()

    def apply(self, poll: Poll, now: float) -> list[tuple[int, str, dict[str, Any]]]:
        """Evaluate the poll and commit it; the (alert id, channel, payload) to enqueue."""
        assert self.session is not None and self.source is not None
        if self._idle(poll, now):
            self.errors, self.last_success, self.last_error = 0, now, None
            return []
        self.session.feed(poll.series, poll.run, reset=poll.reset)
        if poll.reset:
            self.points = 0  # the poll holds the whole run again
        # no clock: the daemon judges what the source holds (stale rules are skipped)
        verdict = self.session.verdict(final=poll.ended)
        reread = self.session.evaluation.reread()
        if reread is not None:  # judged again from its start: the next poll reads it whole
            log.warning("run %s: %s; re-reading it from its start", self.key, reread)
            self.store.reset_run(self.key)
            self._load(self.store_record())
            return []
        run = self.session.run
        assert run is not None
        verdict.run["points"] = self.points + poll.points  # the run's, across restarts
        results = list(verdict.results)
        if self._unreadable():
            results.append(source_result(Status.PASS, "the run can be read again"))
        rows = track(self.rules, results, debounce=self.watched.debounce, final=poll.ended, now=now)
        states, alerts = self._decide(results, rows, verdict.run, now)
        data, text = self.texts.encode(verdict)
        status = data["status"]  # `verdict.status`, worked out once (63 rules read)
        if status != "fail" and any(r.status == "error" and _is_source(r) for r in rows):
            status = "error"  # read again, but recovery is not confirmed yet (debounce)
        commit = PollCommit(
            key=self.key,
            target=self.watched.target,
            cursor=self.source.cursor(),
            evaluation=self.session.evaluation,
            fingerprint=self.watched.fingerprint,
            verdict=data,
            status=status,
            points=self.points + poll.points,
            ended=poll.ended,
            now=now,
            rules=[r for r in rows if _changed(self.rules.get((r.policy, r.rule)), r)],
            alert_states={k: a for k, a in states.items() if self.alerts.get(k) != a},
            alerts=[(ch, p) for ch, p in alerts],
            verdict_text=text,
        )
        try:
            ids = self.store.commit_poll(commit)
        except Exception:
            self._reload()
            raise
        self.cursor, self.verdict, self.status = commit.cursor, commit.verdict, commit.status
        self.points, self.ended, self.name = commit.points, poll.ended, run.name or self.name
        self.rules = {(r.policy, r.rule): r for r in rows}
        self.alerts.update(states)
        self.errors, self.last_success, self.last_error = 0, now, None
        return [(i, ch, p) for i, (ch, p) in zip(ids, alerts, strict=True)]

    def _reload(self) -> None:
        """Back to what is committed; when the store cannot be read either (a shared
        store that is away), at the start of the next fetch."""
        try:
            self._load(self.store_record())
        except Exception:
            self.stale, self.source = True, None

    def _idle(self, poll: Poll, now: float) -> bool:
        """Nothing new and no repeat due: the committed state already says it all."""
        if poll.points or poll.ended or self.source is None or self.source.cursor() != self.cursor:
            return False
        if self._unreadable():
            return False  # readable again: resolve the error even without new data
        repeats = {ch.name: ch.repeat_interval for ch in self.watched.channels}
        return not any(
            a.firing and repeats.get(ch, 0) > 0 and now - a.last_sent >= repeats[ch]
            for (_, _, ch), a in self.alerts.items()
        )

    def _decide(
        self,
        results: list[RuleResult],
        rows: list[RuleRow],
        run: Mapping[str, Any],
        now: float,
    ) -> tuple[dict[tuple[str, str, str], AlertState], list[tuple[str, dict[str, Any]]]]:
        """Per channel: the alert states after this poll and the alerts due."""
        pairs: list[tuple[RuleResult, str]] = [
            (res, row.status)
            for res, row in zip(results, rows, strict=True)
            if res.mode is Mode.ENFORCE  # shadow policies are reported, never paged
        ]
        states: dict[tuple[str, str, str], AlertState] = {}
        alerts: list[tuple[str, dict[str, Any]]] = []
        for ch in self.watched.channels:
            mine: Mapping[tuple[str, str], ChannelState] = {
                (p, r): ChannelState(a.firing, a.last_sent)
                for (p, r, c), a in self.alerts.items()
                if c == ch.name
            }
            due, updated = decide(
                pairs, mine, statuses=ch.statuses, repeat_interval=ch.repeat_interval, now=now
            )
            for (p, r), st in updated.items():
                states[(p, r, ch.name)] = AlertState(st.firing, st.last_sent)
            for res, state, repeat in due:
                alerts.append((ch.name, alert_payload(res, run, self.key, state, now, repeat)))
        return states, alerts

    def _unreadable(self) -> bool:
        row = self.rules.get(SOURCE_KEY)
        return row is not None and row.status != "pass"

    def unreadable(self, error: str, now: float) -> list[tuple[int, str, dict[str, Any]]]:
        """The run cannot be read: commit it as `error` and return the alerts due, as for
        any rule in ERROR (repeats included). Cursor and evaluation stay as committed."""
        result = source_result(Status.ERROR, f"the run cannot be read: {error}")
        prev = self.rules.get(SOURCE_KEY)
        since = prev.since if prev is not None and prev.status == "error" else now
        row = RuleRow(SOURCE_POLICY, SOURCE_RULE, "fail", "error", since, message=result.message)
        run = (self.verdict or {}).get("run") or {"name": self.name}
        states, alerts = self._decide([result], [row], run, now)
        ids = self.store.commit_unreadable(self.key, self.watched.target, now, row, states, alerts)
        self.rules[SOURCE_KEY] = row
        self.alerts.update(states)
        self.status = "error"
        return [(i, ch, p) for i, (ch, p) in zip(ids, alerts, strict=True)]

    def latest(self) -> list[tuple[str, int, float]]:
        """(metric, step, value) of each metric's latest point read by this process; after
        a restart a metric appears again with its next new point (the cursor resumes)."""
        if self.session is None:
            return []
        p = self.session.progress
        return [(m, p.last_step[m], v) for m, v in sorted(p.last_value.items())]

    def store_record(self) -> RunRecord | None:
        return self.store.load_run(self.key)

    def failed(self, error: str, now: float, backoff_max: float) -> None:
        """Count a failed poll and back off: interval x 2^(errors-1), capped."""
        self.errors += 1
        self.last_error = error
        self.source = None  # reopen from the committed cursor next time
        self.next_allowed = now + min(backoff_max, self.watched.interval * 2 ** (self.errors - 1))

    def summary(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "target": self.watched.target,
            "status": self.status,
            "ended": self.ended,
            "points": self.points,
            "errors": self.errors,
            "last_error": self.last_error,
            "last_success": self.last_success,
            "hung": self.in_flight is not None and not self.in_flight.done(),
        }


def _changed(old: RuleRow | None, row: RuleRow) -> bool:
    """Whether `row` is to be written: `track` gives the committed row itself when
    nothing of it changed."""
    return old is not row and old != row


def _is_source(row: RuleRow) -> bool:
    return (row.policy, row.rule) == SOURCE_KEY


def _default_name(key: str) -> str:
    base = key.rstrip("/").rsplit("/", 1)[-1]
    return base[: -len(".jsonl")] if base.endswith(".jsonl") else base
