"""`LiveGate`: one live run judged poll by poll, at O(new points) per poll."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gatekeeper.engine import Evaluation
from gatekeeper.model import Run, Series
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.sources.base import LiveSource, RunOverrides
from gatekeeper.verdict import RuleResult, Status, Verdict


@dataclass(frozen=True)
class Change:
    """A rule whose status differs from the previous poll (`before` None: first seen)."""

    result: RuleResult
    before: Status | None


@dataclass
class Tick:
    """What one poll found and concluded."""

    verdict: Verdict
    changes: list[Change]
    points: int  # new points this poll
    ended: bool  # the source says the run has ended


@dataclass
class Progress:
    """Per-metric counts for the progress line: points, last step and its axis."""

    points: dict[str, int] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)
    axis: dict[str, str] = field(default_factory=dict)

    def add(self, series: dict[str, Series]) -> None:
        for name, s in series.items():
            if len(s):
                self.points[name] = self.points.get(name, 0) + len(s)
                self.last_step[name] = max(
                    self.last_step.get(name, int(s.steps[-1])), int(s.steps[-1])
                )
                self.axis[name] = s.step_key

    @property
    def total(self) -> int:
        return sum(self.points.values())


class LiveGate:
    """Feeds each poll's new points to one `Evaluation` and reports status changes.

    The wall clock comes in as `now` (the engine has none): it is recorded per metric as
    the arrival time of new points, for `stale` rules and `--idle-timeout`.
    """

    def __init__(
        self,
        source: LiveSource,
        policies: Iterable[PolicySpec],
        overrides: RunOverrides | None = None,
        *,
        started: float,
    ):
        self.source = source
        self.evaluation = Evaluation(policies)
        self.overrides = overrides
        self.arrivals: dict[str, float] = {}
        self.progress = Progress()
        self.last_activity = started  # wall time of the last new point (or the start)
        self.run: Run | None = None
        self._statuses: dict[tuple[str, str], Status] = {}

    def poll(self, now: float) -> Tick:
        """Read what is new, judge it live (or final, when the source says it ended)."""
        poll = self.source.poll()
        self.evaluation.feed(poll.series)
        self.progress.add(poll.series)
        for name, s in poll.series.items():
            if len(s):
                self.arrivals[name] = now
        if poll.points:
            self.last_activity = now
        self.run = self._apply(poll.run)
        verdict = self.judge(now, final=poll.ended)
        return Tick(verdict, self._changes(verdict), poll.points, poll.ended)

    def judge(self, now: float, *, final: bool) -> Verdict:
        """The verdict on everything fed so far (final: pending becomes error)."""
        run = self.run or self._apply(Run(name=self.source.spec, source=self.source.spec))
        # The engine names similar metrics for a missing one from the run's series keys.
        run.series = {m: Series.empty(m, a) for m, a in self.progress.axis.items()}
        if final:  # summary-only metrics (HF's train_loss), as `check` reads them
            from gatekeeper.sources.wandb.summary import fill_summary

            fill_summary(self.source, run, self.evaluation.policies)
        verdict = self.evaluation.verdict(run, final=final, now=now, arrivals=self.arrivals)
        verdict.run["points"] = self.progress.total
        return verdict

    def _apply(self, run: Run) -> Run:
        return self.overrides.apply(run) if self.overrides is not None else run

    def _changes(self, verdict: Verdict) -> list[Change]:
        changes = []
        for r in verdict.results:
            key = (r.policy, r.rule)
            before = self._statuses.get(key)
            if before is not r.status:
                changes.append(Change(r, before))
                self._statuses[key] = r.status
        return changes
