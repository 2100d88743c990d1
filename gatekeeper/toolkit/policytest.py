"""Run policy test files against the real engine: the same `Evaluation` the CLI uses,
fed whole, in live polls, or chunk by chunk, and compare each rule's result with what the
test expects. A mismatch is a diff of expected vs got at the test's file:line."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from gatekeeper.checks.baseline import Baselines
from gatekeeper.engine import Evaluation
from gatekeeper.errors import PolicyError, UsageError
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.overrides import apply_cli_overrides, parse_override
from gatekeeper.policy.spec import PolicySpec
from gatekeeper.sources.jsonl.reader import default_step_key
from gatekeeper.toolkit.notation import expand
from gatekeeper.toolkit.testfile import Case, Expectation, LoadedTests, SeriesInput, load_tests
from gatekeeper.verdict import RuleResult, Status, Verdict


@dataclass
class CaseResult:
    file: str
    name: str
    where: str  # file:line of the test
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def build_series(case: Case) -> dict[str, Series]:
    """The test's inputs as engine series: gaps dropped, position i at start + i*every."""
    return _series(case.series)


def _series(inputs: dict[str, SeriesInput]) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for metric, spec in inputs.items():
        values = expand(spec.values)
        pairs = [(spec.start + i * spec.every, v) for i, v in enumerate(values) if v is not None]
        out[metric] = Series.from_lists(
            metric,
            [s for s, _ in pairs],
            [v for _, v in pairs],
            spec.step_key or default_step_key(metric),
        )
    return out


def make_run(case: Case, source: str, series: dict[str, Series]) -> Run:
    r = case.run
    return Run(r.name, source, tuple(r.tags), dict(r.config), r.state, series=series)


def make_references(case: Case, source: str) -> dict[str, Run] | None:
    """The test's earlier runs by reference name (None: none given, as without --reference)."""
    if not case.references:
        return None
    return {
        name: Run(ref.name, f"{source} (references.{name})", series=_series(ref.series))
        for name, ref in case.references.items()
    }


def _window(series: dict[str, Series], lo: int | None, hi: int | None) -> dict[str, Series]:
    """Points with lo < step <= hi (either end open), per metric."""
    out = {}
    for metric, s in series.items():
        keep = np.ones(len(s), bool)
        if lo is not None:
            keep &= s.steps > lo
        if hi is not None:
            keep &= s.steps <= hi
        out[metric] = Series(metric, s.steps[keep], s.values[keep], s.step_key)
    return out


def _chunks(series: dict[str, Series], size: int | None) -> Iterator[dict[str, Series]]:
    """One poll per `size` points of every metric (all at once when size is None)."""
    if size is None:
        yield series
        return
    longest = max((len(s) for s in series.values()), default=0)
    for lo in range(0, longest, size):
        yield {
            m: Series(m, s.steps[lo : lo + size], s.values[lo : lo + size], s.step_key)
            for m, s in series.items()
        }


class CaseRunner:
    """Feeds one case to a fresh Evaluation and collects mismatches."""

    def __init__(self, loaded: LoadedTests, index: int, policies: list[PolicySpec]):
        self.loaded = loaded
        self.index = index
        self.case = loaded.spec.tests[index]
        self.policies = policies
        self.keys = {r.key for p in policies for r in p.rules}

    def run(self) -> CaseResult:
        case = self.case
        result = CaseResult(self.loaded.path, case.name, self.loaded.where(self.index))
        modes: list[int | None] = [None] if case.chunk is None else [None, case.chunk]
        for chunk in modes:
            label = f" (fed in polls of {chunk} points)" if chunk else ""
            result.problems += [p + label for p in self._run_once(chunk)]
        return result

    def _policies(self) -> list[PolicySpec]:
        """The policies with the test's overrides applied, as `check --override` would."""
        if not self.case.overrides:
            return self.policies
        try:
            return apply_cli_overrides(
                self.policies, [parse_override(o) for o in self.case.overrides]
            )
        except UsageError as exc:
            raise PolicyError(
                f"tests[{self.index}].overrides: {exc}",
                file=self.loaded.path,
                line=self.loaded.line(self.index, "overrides"),
            ) from None

    def _run_once(self, chunk: int | None) -> list[str]:
        case = self.case
        series = build_series(case)
        evaluation = Evaluation(self._policies())
        run = make_run(case, self.loaded.path, series)
        now = case.clock.now if case.clock else None
        arrivals = case.clock.arrivals if case.clock else None
        refs = make_references(case, self.loaded.path)
        history = Baselines({}, "empty test store") if case.history == "empty" else None
        problems: list[str] = []
        done: int | None = None
        for j, poll in enumerate(case.polls):
            for part in _chunks(_window(series, done, poll.until), chunk):
                evaluation.feed(part)
            done = poll.until
            verdict = evaluation.verdict(
                run, final=False, now=now, arrivals=arrivals, references=refs, history=history
            )
            where = ("polls", j)
            problems += self._compare(
                verdict, poll.expect, poll.others, where, f"after poll until step {poll.until}"
            )
        for part in _chunks(_window(series, done, None), chunk):
            evaluation.feed(part)
        verdict = evaluation.verdict(
            run, final=not case.live, now=now, arrivals=arrivals, references=refs, history=history
        )
        problems += self._compare(verdict, case.expect, case.others, (), "")
        return problems

    def resolve(self, ref: str, loc: tuple[object, ...]) -> str:
        if ref in self.keys:
            return ref
        hits = [k for k in self.keys if k.split("/", 1)[1] == ref]
        if len(hits) == 1:
            return hits[0]
        what = (
            "is ambiguous: " + ", ".join(sorted(hits))
            if hits
            else "names no rule of the policies under test"
        )
        raise PolicyError(
            f"tests[{self.index}].{'.'.join(map(str, (*loc, 'expect')))}.{ref}: {what} "
            f"(rules: {', '.join(sorted(self.keys))})",
            file=self.loaded.path,
            line=self.loaded.line(self.index, *loc, "expect", ref),
        )

    def _compare(
        self,
        verdict: Verdict,
        expect: dict[str, Expectation],
        others: Status | None,
        loc: tuple[object, ...],
        when: str,
    ) -> list[str]:
        got = {f"{r.policy}/{r.rule}": r for r in verdict.results}
        wanted = {self.resolve(ref, loc): (ref, exp) for ref, exp in expect.items()}
        problems = []
        for key, (ref, exp) in wanted.items():
            line = self.loaded.line(self.index, *loc, "expect", ref)
            diff = diff_result(exp, got[key])
            if diff:
                problems.append(
                    f"{self.loaded.path}:{line}: {key}{' ' + when if when else ''}\n{diff}"
                )
        if others is not None:
            for key, r in got.items():
                if key not in wanted and r.status is not others:
                    line = self.loaded.line(self.index, *loc, "others")
                    problems.append(
                        f"{self.loaded.path}:{line}: {key}{' ' + when if when else ''} (others)\n"
                        + diff_result(Expectation(status=others), r)
                    )
        return problems


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def diff_result(exp: Expectation, got: RuleResult) -> str:
    """Empty when `got` meets `exp`; else a two-line `- expected / + got` diff."""
    ok = got.status is exp.status
    ok &= exp.step is None or got.step == exp.step
    ok &= exp.message is None or exp.message in got.message
    ok &= exp.value is None or _close(exp.value, got.value)
    if ok:
        return ""
    want = [f"status={exp.status.value}"]
    have = [f"status={got.status.value}"]
    if exp.step is not None:
        want.append(f"step={exp.step}")
    have.append(f"step={got.step}")
    if exp.value is not None:
        want.append(f"value={exp.value!r}")
        have.append(f"value={got.value!r}")
    if exp.message is not None:
        want.append(f"message contains {exp.message!r}")
    have.append(f"message={got.message!r}")
    return f"    - expected: {' '.join(want)}\n    + got:      {' '.join(have)}"


def run_file(path: str) -> list[CaseResult]:
    return run_chosen(path)[0]


def run_chosen(
    path: str, keep: Callable[[str], bool] | None = None
) -> tuple[list[CaseResult], int]:
    """The results of the file's cases that `keep` takes (on "FILE::NAME"; all without
    it), and how many cases it left out."""
    loaded = load_tests(path)
    policies = load_policies(loaded.policy_paths)
    cases = loaded.spec.tests
    name = os.path.basename(path)
    chosen = [i for i, c in enumerate(cases) if keep is None or keep(f"{name}::{c.name}")]
    return [CaseRunner(loaded, i, policies).run() for i in chosen], len(cases) - len(chosen)
