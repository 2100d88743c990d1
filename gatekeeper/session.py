"""One judging session: one run judged against a policy set, fed poll by poll.

Every way of judging drives this one object — `check` (the whole run as one poll),
`check --history` (baselines.py around it), `watch`/`run` (`live.gate.LiveGate`), the
in-process `Gate` (through LiveGate) and `gatekeeper serve` (`daemon.watch.RunWatcher`,
which adds only persistence, debounce and alerts). So the run metadata is applied, the
clock is read and a verdict is asked for the same way everywhere.

Feed a poll (`feed`: new series chunks, the run's metadata, the wall time), ask for the
`verdict` and the `changes` since the previous verdict; `to_state`/`from_state` carry the
judging state as plain data (the daemon stores it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.engine import Evaluation, RuleTracker
from gatekeeper.model import Run, Series
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.sources.base import RunOverrides
from gatekeeper.verdict import RuleResult, Status, Verdict


@dataclass(frozen=True)
class Change:
    """A rule whose status differs from the previous verdict (`before` None: first seen)."""

    result: RuleResult
    before: Status | None


@dataclass
class Progress:
    """Per-metric counts for the progress line: points, last step, the value logged at
    that step (NaN/±Inf kept: the daemon exports it as `gatekeeper_metric_value`) and the
    step axis."""

    points: dict[str, int] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)
    last_value: dict[str, float] = field(default_factory=dict)
    axis: dict[str, str] = field(default_factory=dict)

    def add(self, series: Mapping[str, Series]) -> None:
        for name, s in series.items():
            if len(s):
                self.points[name] = self.points.get(name, 0) + len(s)
                step = int(s.steps[-1])
                if step >= self.last_step.get(name, step):
                    self.last_step[name] = step
                    self.last_value[name] = float(s.values[-1])
                self.axis[name] = s.step_key

    @property
    def total(self) -> int:
        return sum(self.points.values())


class JudgingSession:
    """The judging state of one run and what has been said about it.

    `live`: the run is read poll by poll, so its `Run` carries metadata only — the
    session names the metrics it has seen (for "similar: ..." hints), records when each
    metric last got points (for `stale` rules) and counts points in the verdict's run.
    `tags` are added to the run's own (the daemon's per-target tags)."""

    def __init__(
        self,
        policies: Iterable[PolicySpec],
        *,
        live: bool,
        overrides: RunOverrides | None = None,
        tags: Iterable[str] = (),
        evaluation: Evaluation | None = None,
        bounded: bool = False,
    ):
        """`bounded`: a new evaluation is `Evaluation(bounded=True)` (the daemon's)."""
        self.evaluation = (
            evaluation if evaluation is not None else Evaluation(policies, bounded=bounded)
        )
        self.live = live
        self.overrides = overrides
        self.tags = tuple(tags)
        self.run: Run | None = None
        self.arrivals: dict[str, float] = {}
        self.progress = Progress()
        self._statuses: dict[tuple[str, str], Status] = {}
        self._named: dict[str, Series] = {}  # metric -> an empty Series on its axis

    @property
    def policies(self) -> list[PolicySpec]:
        return self.evaluation.policies

    @property
    def trackers(self) -> list[RuleTracker]:
        return self.evaluation.trackers

    # ---- feeding ------------------------------------------------------------------------
    def feed(
        self,
        series: Mapping[str, Series],
        run: Run | None = None,
        *,
        now: float | None = None,
        reset: bool = False,
    ) -> None:
        """Fold one poll: its new points (per metric, sorted by step) and, when given, the
        run's metadata as the source now reports it. `reset`: the series are the whole run
        again (`Poll.reset`), so the points fed before are forgotten; what was said about
        the rules (`changes`) is kept, so a rule that now passes is reported as a change."""
        if reset:
            self.evaluation = Evaluation(self.policies, bounded=self.evaluation.bounded)
            self.progress = Progress()
            self.arrivals = {}
        if run is not None:  # first: a `metric: config.KEY` rule reads it to know its metric
            self.run = self.apply(run)
        self.evaluation.feed(series, self.run)
        self.progress.add(series)
        if now is not None:
            for name, s in series.items():
                if len(s):
                    self.arrivals[name] = now

    def apply(self, run: Run) -> Run:
        """The run as judged: `--config`/`--tag` overrides, then the extra tags."""
        if self.overrides is not None:
            run = self.overrides.apply(run)
        if self.tags:
            run.tags = tuple(dict.fromkeys((*run.tags, *self.tags)))
        return run

    # ---- judging ------------------------------------------------------------------------
    def verdict(
        self,
        *,
        final: bool,
        now: float | None = None,
        history: Any = None,
        references: Mapping[str, Run] | None = None,
        placeholder: Run | None = None,
    ) -> Verdict:
        """The verdict on everything fed so far (final: what is still missing is an error,
        never a pass). `placeholder` is the run judged when no poll has brought metadata."""
        run = self.run or (self.apply(placeholder) if placeholder is not None else None)
        if run is None:
            raise ValueError("a verdict needs the run: feed a poll with its metadata first")
        if self.live:  # metadata only: name the metrics seen, for "similar:" hints
            named = self._named  # empty and frozen: made once, not on every poll
            for m, a in self.progress.axis.items():
                if m not in named or named[m].step_key != a:
                    named[m] = Series.empty(m, a)
            run.series = {m: named[m] for m in self.progress.axis}
        verdict = self.evaluation.verdict(
            run,
            final=final,
            history=history,
            now=now,  # no clock given (check, the daemon): `stale` rules are skipped
            arrivals=self.arrivals if now is not None else None,
            references=references,
        )
        if self.live:
            verdict.run["points"] = self.progress.total
        return verdict

    def changes(self, verdict: Verdict) -> list[Change]:
        """The rules whose status differs from the previous `changes` call's verdict."""
        out = []
        for r in verdict.results:
            key = (r.policy, r.rule)
            before = self._statuses.get(key)
            if before is not r.status:
                out.append(Change(r, before))
                self._statuses[key] = r.status
        return out

    # ---- state as data ------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return self.evaluation.to_state()

    @classmethod
    def from_state(
        cls, policies: Iterable[PolicySpec], data: Any, *, live: bool, tags: Iterable[str] = ()
    ) -> JudgingSession:
        """A session holding the judging state `to_state` saved (StateDataError when the
        data does not fit these policies)."""
        return cls(policies, live=live, tags=tags, evaluation=Evaluation.from_state(policies, data))


def judge_whole(
    policies: Iterable[PolicySpec],
    run: Run,
    *,
    history: Any = None,
    references: Mapping[str, Run] | None = None,
) -> tuple[JudgingSession, Verdict]:
    """A finished run read whole, judged as one poll: what `check` does."""
    session = JudgingSession(policies, live=False)
    session.feed(run.series, run)
    return session, session.verdict(final=True, history=history, references=references)
