"""`LocalJudge`: one run judged in this process, from rows handed to it.

The judging half of a `Gate`: a `MemorySource` fed by the caller and the live engine
(`LiveGate`) polling it, so verdicts and messages are those of `watch`, `run` and
`check`. A synchronous gate holds one on the caller's thread; an asynchronous one holds
it in its judge process (`gatekeeper.inprocess.judge`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.inprocess.rows import MemorySource
from gatekeeper.live.gate import Change, LiveGate
from gatekeeper.model import Run, RunState
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.verdict import GateStatus, RuleResult, Verdict


@dataclass(frozen=True)
class Judged:
    """What one batch of rows concluded: the live gate `status`, the rules whose status
    changed, the rules failing the gate and how many points the rows held."""

    status: GateStatus
    changes: list[Change] = field(default_factory=list)
    failing: list[RuleResult] = field(default_factory=list)
    points: int = 0


class LocalJudge:
    """Rows in, live verdicts out; `final` judges the run as ended."""

    def __init__(self, run: Run, specs: list[PolicySpec], axis: str, started: float):
        self._source = MemorySource(run, axis)
        self._live = LiveGate(self._source, specs, started=started)
        self._verdict = self._live.judge(started, final=False)

    def observe_rows(self, rows: Iterable[Mapping[str, Any]], now: float) -> Judged:
        """Judge a batch of rows; a rejected row raises `UsageError` (the rows before it
        are kept and judged with the next batch)."""
        points = self._source.add_rows(rows)
        tick = self._live.poll(now)
        self._verdict = tick.verdict
        return Judged(tick.verdict.status, tick.changes, tick.verdict.failing(), points)

    def update_run(self, name: str | None, tags: Iterable[str] | None,
                   config: Mapping[str, Any] | None) -> None:
        run = self._source.run
        run.name = name if name is not None else run.name
        run.tags = tuple(tags) if tags is not None else run.tags
        if config is not None:
            run.config = {**run.config, **config}

    def verdict(self) -> Verdict:
        """The live verdict on everything judged so far."""
        return self._verdict

    def final(self, state: RunState, now: float) -> Verdict:
        """The run judged as ended (pending becomes error, as `check` judges it)."""
        self._source.run.state = state
        self._verdict = self._live.judge(now, final=True)
        return self._verdict
