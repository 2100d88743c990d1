"""Statuses, per-rule results and the gate verdict: what every reporter consumes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any


class Status(str, enum.Enum):
    """Outcome of one rule on one run."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    PENDING = "pending"


class GateStatus(str, enum.Enum):
    """Outcome of the whole gate. `fail` wins over `error`; `pending` only while live;
    `nothing_judged` only when final: no gating rule was judged (every enforce-mode,
    fail-severity rule skipped, or there is none), which is not a pass."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    PENDING = "pending"
    NOTHING = "nothing_judged"


# The exit code of a final verdict that judged nothing: pytest's "no tests ran" (5), so
# CI tells it from a pass (0), a failing gate (1), bad input (2) and a bug (70).
EXIT_NOTHING_JUDGED = 5


class Severity(str, enum.Enum):
    FAIL = "fail"
    WARN = "warn"


class Mode(str, enum.Enum):
    ENFORCE = "enforce"
    SHADOW = "shadow"


@dataclass(frozen=True)
class RuleResult:
    """One rule judged on one run; explains itself (metric, step, value, bound, source)."""

    policy: str
    rule: str
    status: Status
    severity: Severity
    mode: Mode
    metric: str
    message: str
    source: str  # policy file:line of the rule
    step: int | None = None
    step_key: str | None = None
    value: float | None = None
    expected: str = ""
    override: str | None = None  # reason, when an override changed this rule
    description: str = ""
    violations: int = 0  # judged points that violated
    judged: int = 0  # points judged
    # For plots (HTML report, step-summary charts): the check's kind and parameters as
    # numbers, the first..last selected step, and the violating steps (the first
    # MAX_MARKED of them; `violations` has the count).
    check: dict[str, Any] | None = None
    span: tuple[int, int] | None = None
    violating_steps: tuple[int, ...] = ()
    overlay: dict[str, list[float]] | None = None  # e.g. history's corridor per step
    # a skip because the source cannot carry the rule's metric at all (a miles CI record
    # keeps 7 keys): the reason, counted on the verdict line apart from other skips
    not_judged: str | None = None

    @classmethod
    def of(cls, **values: Any) -> RuleResult:
        """`RuleResult(**values)` given every field, made without the frozen dataclass's
        `object.__setattr__` per field (~4 us of 5 a result; the engine makes one per
        rule on every live poll). Equal to the constructor's result in every way (fields,
        equality, repr, pickling); tests/test_engine.py pins that."""
        obj = object.__new__(cls)
        obj.__dict__.update(values)
        return obj

    @property
    def enforced(self) -> bool:
        """An enforce-mode, fail-severity rule: one whose failure would fail the gate."""
        return self.mode is Mode.ENFORCE and self.severity is Severity.FAIL

    @property
    def gating(self) -> bool:
        """True when this result fails the gate."""
        return (
            self.mode is Mode.ENFORCE
            and self.severity is Severity.FAIL
            and self.status in (Status.FAIL, Status.ERROR)
        )

    @property
    def file(self) -> str:
        return self.source.rsplit(":", 1)[0]

    @property
    def line(self) -> int | None:
        tail = self.source.rsplit(":", 1)
        return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (NaN/Infinity as strings). Shallow, not `dataclasses.asdict`:
        the daemon stores a verdict on every poll and asdict's deep copies cost a third
        of it; the nested plot data is copied one level, never shared for mutation."""
        data = {name: getattr(self, name) for name in _RESULT_FIELDS}
        for key in ("status", "severity", "mode"):
            data[key] = data[key]._value_  # `.value`: a Python-level property, ~0.3 us
        for key in ("check", "overlay"):
            if data[key] is not None:
                data[key] = dict(data[key])
        value = data["value"]
        if value is not None and value != value:  # NaN is not JSON
            data["value"] = "NaN"
        elif value in (float("inf"), float("-inf")):
            data["value"] = "Infinity" if value > 0 else "-Infinity"
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleResult:
        """Inverse of `to_dict` (a saved JSON verdict); unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["status"] = Status(kw["status"])
        kw["severity"] = Severity(kw["severity"])
        kw["mode"] = Mode(kw["mode"])
        if isinstance(kw.get("value"), str):
            kw["value"] = float(kw["value"])  # "NaN", "Infinity", "-Infinity"
        if kw.get("span") is not None:
            kw["span"] = (int(kw["span"][0]), int(kw["span"][1]))
        kw["violating_steps"] = tuple(int(s) for s in kw.get("violating_steps") or ())
        return cls(**kw)


MAX_MARKED = 1000
# RuleResult's field names in order, found once: `fields()` rebuilds them on each call and
# the daemon turns every result of every run into a dict on every poll
_RESULT_FIELDS = tuple(f.name for f in fields(RuleResult))


@dataclass
class Verdict:
    """All rule results for one run and the gate outcome derived from them."""

    run: dict[str, Any]
    results: list[RuleResult] = field(default_factory=list)
    final: bool = True
    stopped: dict[str, Any] | None = None  # set when a live run was stopped by the gate
    # why a final verdict that judged nothing may pass (--allow-nothing-judged REASON, a
    # policy's allow_nothing_judged); None: judging nothing is NOTHING, exit 5
    nothing_allowed: str | None = None

    @property
    def status(self) -> GateStatus:
        # one pass over the enforced results' statuses (the daemon reads this on every
        # poll: `gating`/`enforced`, Python-level properties, cost ~0.5 us a result)
        statuses = [
            r.status
            for r in self.results
            if r.mode is Mode.ENFORCE and r.severity is Severity.FAIL
        ]
        if Status.FAIL in statuses:  # a gating failure
            return GateStatus.FAIL
        if Status.ERROR in statuses:  # gating, not failing
            return GateStatus.ERROR
        if not self.final:  # live: not judged *yet* is pending, never "nothing judged"
            return GateStatus.PENDING if Status.PENDING in statuses else GateStatus.PASS
        if self.nothing_allowed is None and statuses.count(Status.SKIP) == len(statuses):
            return GateStatus.NOTHING
        return GateStatus.PASS

    def judged(self) -> bool:
        """True when a gating rule (enforce mode, fail severity) was judged: its status is
        not `skip`. A gate whose every such rule skipped (match, when, if_logged, an
        override switching it off), or that has none, judged nothing."""
        return any(r.status is not Status.SKIP and r.enforced for r in self.results)

    @property
    def nothing_judged(self) -> bool:
        """A final verdict that judged nothing, relaxed or not (reports say which)."""
        return self.final and not self.judged()

    @property
    def passed(self) -> bool:
        return self.status in (GateStatus.PASS, GateStatus.PENDING)

    @property
    def exit_code(self) -> int:
        """0 passed (or pending), 1 failed, 5 nothing judged (EXIT_NOTHING_JUDGED)."""
        if self.status is GateStatus.NOTHING:
            return EXIT_NOTHING_JUDGED
        return 0 if self.passed else 1

    def counts(self) -> dict[str, int]:
        return self._tally()[0]

    def not_judged(self) -> dict[str, int]:
        """Skips the source could not avoid, by reason: `{"not captured by the CI record":
        8}` (rules on metrics a miles CI record never keeps). Part of the `skip` count."""
        return self._tally()[1]

    def overridden(self) -> int:
        """How many results an override changed (switched off, made a warning, judged with
        another check): every report counts them beside the statuses."""
        return self._tally()[2]

    def _tally(self) -> tuple[dict[str, int], dict[str, int], int]:
        """`counts`, `not_judged` and `overridden` in one pass over the results (the
        daemon's `to_dict` on every poll needs the three)."""
        counts = {s._value_: 0 for s in Status}
        not_judged: dict[str, int] = {}
        overridden = 0
        for r in self.results:
            counts[r.status._value_] += 1  # not `.value` (a property): on every daemon poll
            if r.status is Status.SKIP and r.not_judged:
                not_judged[r.not_judged] = not_judged.get(r.not_judged, 0) + 1
            if r.override is not None:
                overridden += 1
        return counts, not_judged, overridden

    def failing(self) -> list[RuleResult]:
        return [r for r in self.results if r.gating]

    def to_dict(self, results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Plain JSON data; `results`: the results' `to_dict()`, when the caller has them
        (the daemon keeps those of results equal to the last poll's)."""
        counts, not_judged, overridden = self._tally()
        return {
            "status": self.status.value,
            "final": self.final,
            "run": self.run,
            "counts": {
                **counts, "not_judged": sum(not_judged.values()), "overridden": overridden,
            },
            "not_judged": not_judged,
            "stopped": self.stopped,
            "nothing_judged_allowed": self.nothing_allowed,
            "results": [r.to_dict() for r in self.results] if results is None else results,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """A verdict read back from its JSON report (`gatekeeper report verdict.json`)."""
        return cls(
            run=dict(data.get("run") or {}),
            results=[RuleResult.from_dict(r) for r in data.get("results") or ()],
            final=bool(data.get("final", True)),
            stopped=data.get("stopped"),
            nothing_allowed=data.get("nothing_judged_allowed"),
        )
