"""`LiveGate`: one live run judged poll by poll, at O(new points) per poll."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gatekeeper.engine import Evaluation
from gatekeeper.model import Run
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.session import Change, JudgingSession, Progress
from gatekeeper.sources.base import LiveSource, RunOverrides
from gatekeeper.verdict import Verdict

__all__ = ["Change", "LiveGate", "Progress", "Tick"]


@dataclass
class Tick:
    """What one poll found and concluded."""

    verdict: Verdict
    changes: list[Change]
    points: int  # new points this poll
    ended: bool  # the source says the run has ended


class LiveGate:
    """Feeds each poll of a live source to one `JudgingSession` and reports status changes.

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
        self.session = JudgingSession(policies, live=True, overrides=overrides)
        self.last_activity = started  # wall time of the last new point (or the start)

    @property
    def evaluation(self) -> Evaluation:
        return self.session.evaluation

    @property
    def progress(self) -> Progress:
        return self.session.progress

    @property
    def run(self) -> Run | None:
        return self.session.run

    def poll(self, now: float) -> Tick:
        """Read what is new, judge it live (or final, when the source says it ended).
        When the run's config changed which points a rule selects (`Evaluation.reread`),
        the run is read again from its start and judged anew, as `check` judges it with
        that config (the daemon does the same); a source that cannot read it again
        leaves the rule an error that says why."""
        poll = self.source.poll()
        self.session.feed(poll.series, poll.run, now=now, reset=poll.reset)
        verdict = self.judge(now, final=poll.ended)
        if self.evaluation.reread() is not None and self.source.rewind():
            again = self.source.poll()
            self.session.feed(again.series, again.run, now=now, reset=True)
            poll = replace(poll, ended=again.ended)  # its points are not new ones
            verdict = self.judge(now, final=again.ended)
        if poll.points:
            self.last_activity = now
        return Tick(verdict, self.session.changes(verdict), poll.points, poll.ended)

    def judge(self, now: float, *, final: bool) -> Verdict:
        """The verdict on everything fed so far (final: pending becomes error)."""
        placeholder = Run(name=self.source.spec, source=self.source.spec)
        # summary-only metrics (HF's train_loss), as `check` reads them; only a source
        # with a summary (wandb) has one: the others import no wandb module (protobuf)
        if final and getattr(self.source, "read_summary", None) is not None:
            from gatekeeper.sources.wandb.summary import fill_summary

            if self.session.run is None:
                self.session.run = self.session.apply(placeholder)
            fill_summary(self.source, self.session.run, self.session.policies)
        return self.session.verdict(final=final, now=now, placeholder=placeholder)
