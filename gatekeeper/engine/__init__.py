"""Apply policies to a run. Pure: no clock, no network, no files.

`evaluate(policies, run, final=...)` judges a whole run. Live watchers keep an
`Evaluation` and `feed` it only the new points of each poll (O(new points)); its
`verdict` is the same function of all points fed so far.

A rule is a pipeline (docs/architecture.md, "The rule pipeline"): what the run's
metadata decides (applicability.py, once per change of it), then per rule its
selection (selection.py), reduction (reduction.py) or point-by-point judgement
(judgement.py), in the words of wording.py; tracker.py holds a rule's stages and state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from gatekeeper.checks import AggregateCheck, EvalContext, Outcome
from gatekeeper.engine import wording
from gatekeeper.engine.applicability import Applicability
from gatekeeper.engine.expansion import Templates, concrete, named_metric
from gatekeeper.engine.judgement import severity
from gatekeeper.engine.selection import step_shape
from gatekeeper.engine.tracker import RuleTracker
from gatekeeper.model import Run, Series
from gatekeeper.policy.spec import PolicySpec, RuleSpec
from gatekeeper.run_state import run_state_result
from gatekeeper.statedata import StateDataError, decode
from gatekeeper.verdict import Mode, RuleResult, Status, Verdict

if TYPE_CHECKING:  # imported when a rule has an expression / a present_at check
    from gatekeeper.engine.rounds import Rounds
    from gatekeeper.expr import Aligner

__all__ = ["Evaluation", "RuleTracker", "evaluate"]


class Evaluation:
    """Rule trackers for a set of policies on one run; feed new points, ask for a verdict.

    `bounded` (the daemon): what it keeps is bounded by the rules' windows, not by the
    run's length. Its verdicts are never given a history store or reference runs, so a
    `history` or `isclose` rule keeps its first point only (its outcome is the SKIP or
    ERROR saying so whatever the points); and a `steps: {every: config.k}` selection whose
    period a verdict found unknown counts its points instead of keeping them: a period
    learned later sets `reread()`, and the caller judges the run again from its start.
    Its verdicts equal an unbounded evaluation's on the same points and metadata."""

    def __init__(self, policies: Iterable[PolicySpec], *, bounded: bool = False):
        self.policies = list(policies)
        self.bounded = bounded
        rules = [r for p in self.policies for r in p.rules]
        self.trackers: list[RuleTracker] = []  # the policies' rules, then the ones made
        self.by_metric: dict[str, list[RuleTracker]] = {}
        self.derived: list[tuple[Aligner, RuleTracker]] = []  # expr rules: inputs aligned first
        self.rounds: dict[int, tuple[Rounds, RuleTracker]] = {}  # present_at rules, by id
        self.axis_last: dict[str, int] = {}  # step axis -> last step of any metric on it
        # what the run's metadata decides, worked out again only when it changes
        self.applicability = Applicability(self.policies, self.trackers)
        # rules on a metric pattern or `config.KEY`, and the rules made of them (expansion.py)
        self.templates = Templates(rules)
        self.made: dict[str, list[RuleTracker]] = {}  # template key -> its concrete rules
        self.late: str | None = None  # a config-named metric learned after its points came
        self.unjudged: dict[int, str] = {}  # tracker id -> why its points are not all fed
        self._order: list[int] | None = None  # result order: templates where made ones go
        for rule in rules:
            self._track(RuleTracker(rule, bounded=bounded))
        self.base = len(self.trackers)

    def _track(self, tracker: RuleTracker) -> None:
        self.trackers.append(tracker)
        rule = tracker.rule
        self._order = None
        self.applicability.refresh()
        if rule.template:  # stands for metrics; made concrete as they appear (expansion.py)
            return
        if rule.expr is not None:
            from gatekeeper.expr import Aligner

            self.derived.append((Aligner(rule.expr), tracker))
        elif rule.check.kind == "present_at":
            from gatekeeper.engine.rounds import Rounds

            check: Any = rule.check
            self.rounds[id(tracker)] = (Rounds(rule.metric, check.steps_of, check.unless), tracker)
        else:
            self.by_metric.setdefault(rule.metric, []).append(tracker)

    def _make(self, template: RuleSpec, metric: str) -> RuleTracker:
        tracker = RuleTracker(concrete(template, metric), bounded=self.bounded)
        self.made.setdefault(template.key, []).append(tracker)
        self._track(tracker)
        return tracker

    def _drop(self, tracker: RuleTracker) -> None:
        self.trackers.remove(tracker)
        same = self.by_metric.get(tracker.rule.metric, [])
        if tracker in same:
            same.remove(tracker)
        self.rounds.pop(id(tracker), None)
        self.unjudged.pop(id(tracker), None)
        self._order = None
        self.applicability.refresh()

    def _expand(self, series: Mapping[str, Series], run: Run | None) -> None:
        """Make the template rules concrete for metrics new in `series` (patterns) and for
        what the run's config names (`config.KEY`)."""
        if run is not None:
            self._resolve(run)
        names = [name for name, s in series.items() if len(s)]
        for template, metric in self.templates.new_metrics(names):
            self._make(template, metric)

    def _resolve(self, run: Run) -> None:
        for template in self.templates.configs:
            metric = named_metric(template, run)  # None: the rule's applicability says why
            made = self.made.get(template.key, [])
            if made and made[0].rule.metric == metric:
                continue
            for tracker in made:
                self._drop(tracker)
            self.made[template.key] = []
            if metric is None:
                continue
            tracker = self._make(template, metric)
            if self.templates.fed(metric):  # its points came before the rule knew it
                self.late = f"rule {template.key}: {wording.metric_learned_late(metric)}"
                self.unjudged[id(tracker)] = self.late

    def _result_order(self) -> list[int]:
        """Indices of the trackers in result order: each template's made rules (by metric)
        where it is declared, or the template itself while it stands for none."""
        if self._order is None:
            position = {id(t): i for i, t in enumerate(self.trackers)}
            order: list[int] = []
            for tracker in self.trackers[: self.base]:
                made = self.made.get(tracker.rule.key) if tracker.rule.template else None
                if made:
                    order += [position[id(t)] for t in sorted(made, key=lambda t: t.rule.metric)]
                else:
                    order.append(position[id(tracker)])
            self._order = order
        return self._order

    # ---- state as data -----------------------------------------------------------------
    def to_state(self, entry: Entry | None = None) -> dict[str, Any]:
        """What has been fed, as plain data: per rule its tracker (and a present_at
        rule's unsettled rounds), per derived rule its aligner's buffered inputs, the last
        step of each step axis; with template rules, the rules made of them, and with a
        `config.KEY` rule the metric names fed (`tried`: a config that names one of them
        later finds its points came before its rule, after a restart too).
        `entry(tracker, changes, make)` stands for a rule's entry in `rules` and `made`
        (default: `make()`, the entry as data); `changes` is None where the entry changes
        apart from its tracker's count (unsettled rounds). The daemon gives one that keeps
        the JSON of an entry whose tracker's `changes` did not move."""
        entry = entry or _made
        out = {
            "bounded": self.bounded,
            "rules": [self._saved(t, entry) for t in self.trackers[: self.base]],
            "aligners": [a.to_state() for a, _ in self.derived],
            "axis_last": dict(self.axis_last),
        }
        if self.templates.patterns or self.templates.configs:
            out["made"] = [
                self._saved(t, entry, key) for key, made in self.made.items() for t in made
            ]
        if self.templates.configs and not self.templates.unknown:  # unknown: left out again
            out["tried"] = self.templates.saved()
        return out

    def _saved(self, tracker: RuleTracker, entry: Entry, of: str | None = None) -> Any:
        rounds = self.rounds.get(id(tracker))

        def make() -> dict[str, Any]:
            saved = {"key": tracker.rule.key, "tracker": tracker.to_state()}
            if of is not None:
                saved = {"of": of, "metric": tracker.rule.metric, **saved}
                if id(tracker) in self.unjudged:  # set as it is made, kept while it lives
                    saved["unjudged"] = self.unjudged[id(tracker)]
            if rounds is not None:
                saved["rounds"] = rounds[0].to_state()
            return saved

        return entry(tracker, None if rounds is not None else tracker.changes, make)

    @classmethod
    def from_state(cls, policies: Iterable[PolicySpec], data: Any) -> Evaluation:
        """An Evaluation of `policies` holding what `to_state` saved (StateDataError when
        the data does not fit these policies' rules)."""
        keys = {"bounded", "rules", "aligners", "axis_last"}
        if not isinstance(data, dict) or not keys <= set(data) <= {*keys, "made", "tried"}:
            raise StateDataError(f"evaluation: expected a mapping of {', '.join(sorted(keys))}")
        ev = cls(policies, bounded=decode(data["bounded"], bool, "evaluation.bounded"))
        made = data.get("made", [])
        rules, aligners = data["rules"], data["aligners"]
        if not all(isinstance(x, list) for x in (rules, aligners, made)):
            raise StateDataError("evaluation: rules, aligners and made must be lists")
        if len(rules) != len(ev.trackers):
            raise StateDataError("evaluation: its rules are not these policies' rules")
        for i, (tracker, saved) in enumerate(zip(list(ev.trackers), rules, strict=True)):
            ev._restore(tracker, saved, f"evaluation.rules[{i}]")
        ev._restore_made(made)
        if len(aligners) != len(ev.derived):
            raise StateDataError("evaluation: its derived rules are not these policies'")
        for i, ((aligner, _), saved) in enumerate(zip(ev.derived, aligners, strict=True)):
            aligner.restore(saved, f"evaluation.aligners[{i}]")
        ev.axis_last = decode(data["axis_last"], dict[str, int], "evaluation.axis_last")
        if "tried" in data:
            ev.templates.tried.update(decode(data["tried"], list[str], "evaluation.tried"))
        elif ev.templates.configs:  # saved before `tried` was: what was fed is unknown
            ev.templates.unknown = True
        return ev

    def _restore_made(self, made: list[Any]) -> None:
        """The rules made of templates, as `to_state` saved them (`made`)."""
        templates = {r.key: r for r in (*self.templates.patterns, *self.templates.configs)}
        for i, saved in enumerate(made):
            where = f"evaluation.made[{i}]"
            of = saved.get("of") if isinstance(saved, dict) else None
            if of not in templates:
                raise StateDataError(f"{where}: not made of a template rule of these policies")
            metric = decode(saved.get("metric"), str, f"{where}.metric")
            tracker = self._make(templates[of], metric)
            self._restore(tracker, saved, where)
            if templates[of] in self.templates.patterns:  # made as its metric was fed; a
                # `config.KEY` rule is made from the config, its metric maybe not fed yet
                self.templates.tried.add(metric)
            if "unjudged" in saved:  # learned late: still to be read again (`reread`)
                why = decode(saved["unjudged"], str, f"{where}.unjudged")
                self.late = self.unjudged[id(tracker)] = why

    def _restore(self, tracker: RuleTracker, saved: Any, where: str) -> None:
        if not isinstance(saved, dict) or saved.get("key") != tracker.rule.key:
            raise StateDataError(f"{where}: not rule {tracker.rule.key}")
        tracker.restore(saved.get("tracker"), f"{where}.tracker")
        if id(tracker) in self.rounds:
            self.rounds[id(tracker)][0].restore(saved.get("rounds"), f"{where}.rounds")

    def feed(self, series: Mapping[str, Series], run: Run | None = None) -> None:
        """Fold new points (per metric, sorted by step) into every rule that reads them.
        `run`: the run's metadata, when known, so a `metric: config.KEY` rule knows its
        metric before its first points (given later, see `reread`)."""
        if self.templates.patterns or self.templates.configs:
            self._expand(series, run)
        for part in series.values():
            if len(part):
                hi = int(part.steps[-1])
                self.axis_last[part.step_key] = max(self.axis_last.get(part.step_key, hi), hi)
        shapes: dict[int, tuple[int, int, int]] = {}  # by steps array: a row's metrics share one
        for metric, trackers in self.by_metric.items():
            s = series.get(metric)
            if s is not None and len(s):
                shape = shapes.get(id(s.steps))  # once per steps array, not per rule
                if shape is None:
                    shape = shapes[id(s.steps)] = step_shape(s.steps)
                # every value finite (not .all(), which goes through a Python wrapper)
                finite = np.count_nonzero(np.isfinite(s.values)) == s.values.size
                for tracker in trackers:
                    tracker.feed(s.steps, s.values, s.step_key, shape, finite)
        for aligner, tracker in self.derived:
            new = aligner.feed(series)
            if new is not None:
                tracker.feed(new[0], new[1], aligner.step_key or "step")
        for rounds, tracker in self.rounds.values():
            settled = rounds.feed(series, self.axis_last)
            if settled is not None:
                tracker.feed(*settled)

    def reread(self) -> str | None:
        """Why the run must be judged again from its start, or None: a bounded evaluation
        learned a period after counting points it would select, or (any evaluation) the
        run's config changed a period after points were judged by it. The daemon re-reads
        the run; `watch` keeps judging by the first period. Also: a `metric: config.KEY`
        rule learned its metric after points of that metric were fed (its result is an
        error until the run is judged again)."""
        if self.late is not None:
            return self.late
        for tracker in self.trackers:
            if tracker.selection.reread is not None:
                return f"rule {tracker.rule.key}: {tracker.selection.reread}"
        return None

    def verdict(
        self,
        run: Run,
        *,
        final: bool,
        history: Any = None,
        now: float | None = None,
        arrivals: Mapping[str, float] | None = None,
        references: Mapping[str, Run] | None = None,
    ) -> Verdict:
        """`now` and `arrivals` (metric -> wall time its last new point arrived) come from
        a live watcher, for `stale` rules; without them those rules are skipped.
        `references` are earlier runs by name, for `isclose` rules."""
        arrivals = arrivals or {}
        if self.bounded and (history is not None or references):
            raise ValueError("a bounded evaluation keeps no points for history or references")
        if self.templates.configs:
            self._resolve(run)
        self.applicability.update(run)
        if self.bounded:
            for tracker in self.trackers:
                if tracker.rule.steps.period_from:  # the only ones that may park (a few)
                    tracker.park()
        if final:  # the run has ended: its last rounds are settled
            for rounds, tracker in self.rounds.values():
                settled = rounds.flush()
                if settled is not None:
                    tracker.feed(*settled)
        shared = {"run": run, "history": history, "now": now, "references": references}
        before = self.applicability.before  # per rule, the outcome the metadata decides
        order = self._result_order()
        results = [self._judged(i, before[i], final, shared, arrivals) for i in order]
        allowed = self.applicability.allowed  # run states relaxed by the policies that apply
        ended = run_state_result(run, final=final, allowed=allowed)  # how the run ended
        if ended is not None:
            results.append(ended)
        nothing = _nothing_allowed(self.policies, run)
        return Verdict(run=run.summary(), results=results, final=final, nothing_allowed=nothing)

    def _judged(
        self,
        i: int,
        decided: Outcome | None,
        final: bool,
        shared: dict[str, Any],
        arrivals: Mapping[str, float],
    ) -> RuleResult:
        """Rule `i`'s result. Live, the result of its last verdict is given again while
        nothing it is a function of changed: its tracker's `changes` (every change of its
        state; the run's metadata too: `bind` counts on each change of what the policies
        read of it) or, where the metadata decides its outcome, what `_result` reads of the
        tracker (`_reads`), the outcome the metadata (or a part fed before its rule was
        known) decides, and the context fields its check reads (`Check.context_fields`: the clock
        for `stale`). A final verdict judges anew: it reads the run itself (summary values,
        the metrics it names) and the axis' last step (a `last` selection)."""
        tracker = self.trackers[i]
        rule = tracker.rule
        if decided is None and id(tracker) in self.unjudged:  # never judged on a part
            decided = Outcome(Status.ERROR, self.unjudged[id(tracker)])
        if decided is None and tracker.selection.reread is not None:  # judged on the wrong points
            decided = Outcome(Status.ERROR, wording.judge_again(tracker.selection.reread))
        names = rule.check.context_fields
        if decided is None:
            tracker.see_axis(self.axis_last.get(tracker.selection.step_key or ""))
        # what of the context the check reads keys the result (no context read: decided)
        inputs = None if final else _inputs(names, decided is None, rule, shared, arrivals)
        kept, key = tracker.kept, (_reads(tracker, decided), decided, inputs)
        if kept is not None and inputs is not None and kept[0] == key:
            return kept[1]
        outcome, overlay = decided, None
        if decided is None:
            ctx = _rule_context(rule, shared, arrivals)
            outcome = tracker.outcome(final=final, ctx=ctx)
            if isinstance(rule.check, AggregateCheck) and outcome.status is not Status.SKIP:
                overlay = rule.check.overlay(tracker.agg_state, ctx)
        assert outcome is not None
        result = _result(rule, outcome, tracker, overlay, points=decided is None)
        kept = (_reads(tracker, decided), decided, inputs), result
        tracker.kept = None if inputs is None else kept
        return result


def _reads(tracker: RuleTracker, decided: Outcome | None) -> Any:
    """What a rule's result reads of its tracker: its whole state (`changes`) where it
    is judged; where the metadata decides its outcome, only the rule (bound or not: its
    bound, expectation and plot parameters), the step axis, the span and the marked steps
    (`_result`), which the points it is still fed mostly leave as they are."""
    if decided is None:
        return tracker.changes
    return tracker.rule, tracker.selection.step_key, tracker.span, tracker.marked


def evaluate(
    policies: Iterable[PolicySpec],
    run: Run,
    *,
    final: bool = True,
    history: Any = None,
    references: Mapping[str, Run] | None = None,
) -> Verdict:
    """Judge a whole run against the policies."""
    ev = Evaluation(policies)
    ev.feed(run.series, run)
    return ev.verdict(run, final=final, history=history, references=references)


# what stands for a rule's saved entry: (its tracker, its `changes` or None, make the data)
Entry = Callable[[RuleTracker, int | None, Callable[[], dict[str, Any]]], Any]


def _made(tracker: RuleTracker, changes: int | None, make: Callable[[], dict[str, Any]]) -> Any:
    return make()


def _nothing_allowed(policies: Iterable[PolicySpec], run: Run) -> str | None:
    """Why a verdict that judges no gating rule may pass: the flag, else an enforce-mode
    policy's `allow_nothing_judged` -- whether or not its `match:` holds, as a policy
    that does not apply to this run is the usual reason nothing was judged. A shadow
    policy's counts only when every policy is shadow (a report-only gate, such as miles'
    history gate): it never excuses an enforce policy that judged nothing."""
    if run.allow_nothing_judged is not None:
        return run.allow_nothing_judged
    policies = list(policies)
    only_shadow = all(p.mode is Mode.SHADOW for p in policies)
    for p in policies:
        if p.allow_nothing_judged is not None and (p.mode is Mode.ENFORCE or only_shadow):
            return f"policy {p.name}: {p.allow_nothing_judged}"
    return None


def _rule_context(
    rule: RuleSpec, shared: dict[str, Any], arrivals: Mapping[str, float]
) -> EvalContext:
    """The verdict's context as one rule's check sees it."""
    return _context(**shared, **_own_fields(rule, arrivals))  # not replace(): ~10 us a rule


def _own_fields(rule: RuleSpec, arrivals: Mapping[str, float]) -> dict[str, Any]:
    """The context's fields that are the rule's own (the others are the verdict's)."""
    return {"rule_key": rule.key, "last_arrival": arrivals.get(rule.metric), "metric": rule.metric}


def _context(**values: Any) -> EvalContext:
    """`EvalContext(**values)` given every field, without the frozen dataclass's
    `object.__setattr__` per field (~2 us a rule on every verdict); equal to it in every
    way (tests/test_engine.py pins that)."""
    ctx = object.__new__(EvalContext)
    ctx.__dict__.update(values)
    return ctx


_SCALARS = frozenset({int, float, str, bool})


def _inputs(
    names: tuple[str, ...] | None,
    reads: bool,
    rule: RuleSpec,
    shared: dict[str, Any],
    arrivals: Mapping[str, float],
) -> tuple[Any, ...] | None:
    """The values of the context fields a check reads (`reads`: it is judged, not decided
    by the metadata), where they can key its result: None where it does not say which it
    reads, or one is an object (a run, a history store, reference runs) whose contents
    may change under the same identity. Read from what the context is made of, so a
    rule given its kept result has no context made."""
    if names is None:
        return None
    if not reads or not names:
        return ()
    own = _own_fields(rule, arrivals)
    values = tuple(shared[name] if name in shared else own[name] for name in names)
    if any(v is not None and type(v) not in _SCALARS for v in values):
        return None
    return values


def _plot(
    tracker: RuleTracker, overlay: dict[str, list[float]] | None, points: bool
) -> dict[str, Any]:
    """What a plot of the rule needs beyond the outcome: bound parameters, the judged
    selection and the violating steps (reporters draw; the engine only records). Not
    `points`: the run's metadata decided the outcome (not applicable, a bound or period
    it lacks), so no selection or violation is shown, whatever its points were judged by
    before the metadata said so (live, a config that came late)."""
    if tracker.plot_params is None:  # dumped once: a live verdict is asked on every poll
        check, rule = tracker.rule.check, tracker.rule
        params = {"kind": check.kind, **check.model_dump(mode="json")}
        value = params.get("value")
        if rule.check_from is not None and isinstance(value, float) and value != value:
            params["value"] = rule.check_from  # not bound to a run: the key, never a NaN
        tracker.plot_params = params
    violating: tuple[int, ...] = tracker.marked  # ints already (_judge_finite, decode)
    if overlay is not None:  # an aggregate check's own violating steps (history: drifting)
        overlay = dict(overlay)
        drift = overlay.pop("drift", None) or []
        violating = tuple(int(s) for s in (tracker.marked or drift))
    return {
        "check": dict(tracker.plot_params),  # each result its own copy
        "span": tracker.span if points else None,
        "violating_steps": violating if points else (),
        "overlay": overlay,
    }


def _result(
    rule: RuleSpec,
    out: Outcome,
    tracker: RuleTracker,
    overlay: dict[str, list[float]] | None,
    points: bool,
) -> RuleResult:
    return RuleResult.of(  # every field given: no per-field frozen setattr
        policy=rule.policy,
        rule=rule.id,
        status=severity(rule, out.status),
        severity=rule.severity,
        mode=rule.mode,
        metric=rule.metric,
        message=out.message,
        source=rule.source,
        step=out.step,
        step_key=tracker.step_key,
        value=out.value,
        expected=tracker.expected(),
        override=rule.override,
        description=rule.description,
        violations=out.violations,
        judged=out.judged,
        **_plot(tracker, overlay, points),
        not_judged=out.not_judged,
    )
