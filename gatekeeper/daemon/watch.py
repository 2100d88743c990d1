"""One watched run: poll its live source, evaluate, debounce, decide alerts, commit.

`fetch` does the source I/O (run under a timeout by the scheduler); `apply` folds the
poll into the persisted state in one transaction and returns the alerts to enqueue.
The judging itself is a `session.JudgingSession`, as for `check` and `watch`; a watcher
adds persistence, debounce and alerts. The in-memory session always matches the
in-memory cursor: a failed fetch changes nothing, a failed commit drops the in-memory
state so it is reloaded from the store (at once, or before the next fetch when the
store cannot be read either).

With `poll.checkpoint` > 0 a poll that changes nothing seen outside (no rule's status,
severity or debounce count, no alert, not the run's status) stays in memory, ahead of
the store, until the next poll that does, its period after the last commit (half to all
of `checkpoint`, by the run's key), or `flush` (a clean stop, a run handed back). Lost in
a crash, such polls are read again from the committed cursor: the source still holds
their points.
"""

from __future__ import annotations

import logging
import threading
import zlib
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
from gatekeeper.verdict import Mode, RuleResult, Severity, Status, Verdict

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
    checkpoint: float = 0.0  # poll.checkpoint: 0, every poll is committed


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
    # poll.checkpoint: the in-memory poll not committed yet (its verdict; `cursor`,
    # `rules`, `status` and `points` are then its, ahead of the store), the rule rows it
    # changed that the store lacks, and when the last commit was (None: nothing usable
    # is committed, the next poll commits)
    held: Verdict | None = None
    unsaved: dict[tuple[str, str], RuleRow] = field(default_factory=dict)
    committed_at: float | None = None
    held_polls: int = 0  # polls held since the last commit

    def __post_init__(self, record: RunRecord | None) -> None:
        self.name = self.name or _default_name(self.key)
        self._load(record)

    def _load(self, rec: RunRecord | None) -> None:
        self.source = None
        evaluation, self.cursor = self._restore(rec), None
        self.held, self.unsaved, self.committed_at, self.held_polls = None, {}, None, 0
        if evaluation is not None:
            assert rec is not None
            self.cursor, self.committed_at = rec.cursor, rec.updated
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
        """Source I/O only: open (resuming from the cursor the session has read to) and
        poll."""
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
        """Evaluate the poll and commit it (or hold it: poll.checkpoint); the (alert id,
        channel, payload) to enqueue."""
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
        points = self.points + poll.points  # the run's, across restarts
        verdict.run["points"] = points
        results = list(verdict.results)
        if self._unreadable():
            results.append(source_result(Status.PASS, "the run can be read again"))
        rows = track(self.rules, results, debounce=self.watched.debounce, final=poll.ended, now=now)
        states, alerts = self._decide(results, rows, verdict.run, now)
        # the status is worked out once (63 rules read): by the encoding, when every poll
        # is committed
        encoded = None if self.watched.checkpoint > 0 else self.texts.encode(verdict)
        status = verdict.status.value if encoded is None else encoded[0]["status"]
        if status != "fail" and any(r.status == "error" and _is_source(r) for r in rows):
            status = "error"  # read again, but recovery is not confirmed yet (debounce)
        self.name = run.name or self.name
        if encoded is None and self._holds(poll, rows, states, alerts, status, now):
            self._hold(verdict, rows, status, points)
            self.errors, self.last_success, self.last_error = 0, now, None
            return []
        commit = Held(verdict, rows, status, points, self.source.cursor(), poll.ended, polls=1)
        ids = self._commit(commit, states, alerts, now, encoded)
        self.alerts.update(states)
        self.errors, self.last_success, self.last_error = 0, now, None
        return [(i, ch, p) for i, (ch, p) in zip(ids, alerts, strict=True)]

    def _commit(
        self,
        poll: Held,
        states: dict[tuple[str, str, str], AlertState],
        alerts: list[tuple[str, dict[str, Any]]],
        now: float,
        encoded: tuple[dict[str, Any], str] | None = None,
    ) -> list[int]:
        """Write the poll (and what polls held in memory before it) in one transaction;
        the outbox ids of `alerts`; `encoded`: the verdict's data and text, when made
        already. A failed commit reloads what the store holds."""
        assert self.session is not None
        data, text = encoded or self.texts.encode(poll.verdict)
        commit = PollCommit(
            key=self.key,
            target=self.watched.target,
            cursor=poll.cursor,
            evaluation=self.session.evaluation,
            fingerprint=self.watched.fingerprint,
            verdict=data,
            status=poll.status,
            points=poll.points,
            ended=poll.ended,
            now=now,
            rules=[
                r
                for r in poll.rows
                if _changed(self.rules.get((r.policy, r.rule)), r)
                or (r.policy, r.rule) in self.unsaved  # moved in a held poll
            ],
            alert_states={k: a for k, a in states.items() if self.alerts.get(k) != a},
            alerts=alerts,
            verdict_text=text,
            polls=self.held_polls + poll.polls,
        )
        try:
            ids = self.store.commit_poll(commit)
        except Exception:
            self._reload()
            raise
        self.cursor, self.verdict, self.status = commit.cursor, commit.verdict, commit.status
        self.points, self.ended = commit.points, commit.ended
        self.rules = {(r.policy, r.rule): r for r in poll.rows}
        self.held, self.unsaved, self.committed_at, self.held_polls = None, {}, now, 0
        return ids

    def _holds(
        self,
        poll: Poll,
        rows: list[RuleRow],
        states: dict[tuple[str, str, str], AlertState],
        alerts: list[tuple[str, dict[str, Any]]],
        status: str,
        now: float,
    ) -> bool:
        """Whether this poll may stay in memory (poll.checkpoint): nothing of it is seen
        outside the verdict's text and the rules' messages, and the last commit is
        younger than this run's period."""
        if self.watched.checkpoint <= 0 or self._due(now):
            return False
        if poll.ended or poll.reset or alerts or status != self.status:
            return False
        if any(self.alerts.get(k) != a for k, a in states.items()):
            return False
        return all(_same_standing(self.rules.get((r.policy, r.rule)), r) for r in rows)

    def _due(self, now: float) -> bool:
        """Whether a commit is due: nothing usable is committed, or this run's period
        has passed since the last commit. The period is half to all of poll.checkpoint,
        by the run's key, so that runs started together (a daemon's start, a takeover)
        do not all commit together every period."""
        every = self.watched.checkpoint * (0.5 + (zlib.crc32(self.key.encode()) % 1024) / 2048)
        return self.committed_at is None or now - self.committed_at >= every

    def _hold(self, verdict: Verdict, rows: list[RuleRow], status: str, points: int) -> None:
        """Keep the poll in memory: what the API shows moves on, the store stays; the
        rows whose message moved are remembered for the next commit."""
        assert self.source is not None
        for r in rows:
            key = (r.policy, r.rule)
            if _changed(self.rules.get(key), r):
                self.unsaved[key] = r
        self.cursor, self.held, self.held_polls = self.source.cursor(), verdict, self.held_polls + 1
        self.status, self.points = status, points
        self.rules = {(r.policy, r.rule): r for r in rows}

    def flush(self, now: float) -> bool:
        """Commit the poll held in memory, if any (a clean stop, a run handed back);
        whether there was one."""
        with self.polling:
            verdict = self.held
            if verdict is None or self.cursor is None:
                return False
            rows = list(self.rules.values())
            held = Held(verdict, rows, self.status, self.points, self.cursor, False, polls=0)
            self._commit(held, {}, [], now)
            return True

    def current_verdict(self) -> dict[str, Any] | None:
        """The verdict of the last poll, committed or held in memory."""
        held = self.held
        return held.to_dict() if held is not None else self.verdict

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
        if self.held is not None and self._due(now):
            return False  # a held poll is due to be committed
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
        self.unsaved.pop(SOURCE_KEY, None)
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
            "held_polls": self.held_polls,  # judged, not committed yet (poll.checkpoint)
            "errors": self.errors,
            "last_error": self.last_error,
            "last_success": self.last_success,
            "hung": self.in_flight is not None and not self.in_flight.done(),
        }


@dataclass(frozen=True)
class Held:
    """What a poll makes of the run that its commit writes."""

    verdict: Verdict
    rows: list[RuleRow]
    status: str
    points: int
    cursor: dict[str, Any]
    ended: bool
    polls: int  # 1 for a poll, 0 for a flush (its polls were counted as they were held)


def _same_standing(old: RuleRow | None, row: RuleRow) -> bool:
    """Whether `row` says what `old` says but for its message: the same confirmed and
    candidate status, since the same time, at the same severity."""
    return old is row or (
        old is not None
        and (old.status, old.since, old.severity) == (row.status, row.since, row.severity)
        and (old.candidate, old.candidate_count) == (row.candidate, row.candidate_count)
    )


def _changed(old: RuleRow | None, row: RuleRow) -> bool:
    """Whether `row` is to be written: `track` gives the committed row itself when
    nothing of it changed."""
    return old is not row and old != row


def _is_source(row: RuleRow) -> bool:
    return (row.policy, row.rule) == SOURCE_KEY


def _default_name(key: str) -> str:
    base = key.rstrip("/").rsplit("/", 1)[-1]
    return base[: -len(".jsonl")] if base.endswith(".jsonl") else base
