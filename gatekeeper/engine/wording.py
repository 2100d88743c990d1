"""Wording: every sentence a rule's verdict says, in one place.

Alerts group runs by a message minus its numbers, so a sentence's words must not change
with the counts in it (no singular/plural switch where a count varies across polls).
"""

from __future__ import annotations

from collections.abc import Iterable

from gatekeeper.fmt import fmt
from gatekeeper.model import Capture
from gatekeeper.policy.schema import Steps
from gatekeeper.policy.spec import RuleSpec


def fixed_texts(rule: RuleSpec) -> tuple[str, str]:
    """(the check's bound, the rule's expectation): constant for a rule."""
    return rule.check.describe(), rule.describe_expected()


# ---- applicability: what the run's metadata decides -----------------------------------
def policy_tags(policy: str, tags: Iterable[str]) -> str:
    return f"policy {policy} applies to runs tagged {', '.join(tags)}"


def policy_name(policy: str, pattern: str, name: str) -> str:
    return f"policy {policy} applies to runs named {pattern!r}, not {name!r}"


def policy_when(policy: str, condition: str) -> str:
    return f"policy {policy} applies when {condition}"


def allowed_state(policy: str, reason: str) -> str:
    return f"policy {policy}: {reason}"


def switched_off(override: str | None) -> str:
    return f"switched off by override: {override}"


def not_applicable(condition: str, found: bool, value: object) -> str:
    has = f"run has {value!r}" if found else "run does not set it"
    return f"not applicable: needs {condition} ({has})"


# ---- selection ---------------------------------------------------------------------------
def no_period(keys: tuple[str, ...]) -> str:
    return f"the run's config sets none of {', '.join(keys)}, and steps every has no default"


def period_after_dropped(period: int, dropped: int) -> str:
    return (
        f"the run's config gave the period of steps every ({period}) after {dropped} points "
        "had been counted without it"
    )


def period_changed(old: int, new: int | str) -> str:
    now = f"to {new}" if isinstance(new, int) else f"to none ({new})"
    return f"the run's config changed the period of steps every from {old} {now}"


def judge_again(why: str) -> str:
    """A rule whose points were selected by a period the run's config no longer gives: the
    daemon and `watch` read the run again; an in-process gate cannot."""
    return (
        f"{why}: the points judged so far were selected by the old one; judge the run "
        "again from its start (`gatekeeper check`)"
    )


def _has(axis: str, lo: int | None, hi: int | None) -> str:
    return f"{axis} has {lo}..{hi}"


def missing_steps(axis: str, missing: set[int], lo: int | None, hi: int | None) -> str:
    listed = ",".join(map(str, sorted(missing)))
    return f"required {axis} {listed} missing ({_has(axis, lo, hi)})"


def no_points(sel: Steps, axis: str, lo: int | None, hi: int | None) -> str:
    return f"no points in steps {sel.describe()} ({_has(axis, lo, hi)})"


def stopped_early(sel: Steps, metric: str, axis: str, last: int, axis_last: int) -> str:
    return (
        f"steps {sel.describe()}: {metric}'s points end at {axis} {last}, but the run "
        f"reaches {axis} {axis_last}; its last value is not the run's (the metric stopped "
        "being logged, or its values were dropped)"
    )


def ends_before_others(metric: str, axis: str, last: int, axis_last: int) -> str:
    return (
        f"{metric}'s last point is at {axis} {last}, other metrics reach {axis} {axis_last} "
        f"({axis} is each metric's own counter here)"
    )


def pending_end(sel: Steps) -> str:
    return f"judged when the run ends ({sel.describe()})"


# ---- reduction ---------------------------------------------------------------------------
def pending_reduction(rule: RuleSpec) -> str:
    return f"{rule.reduce.value} judged once steps {rule.steps.describe()} are in"


def nonfinite_in_reduction(rule: RuleSpec, axis: str, step: int, value: float) -> str:
    return f"non-finite value {fmt(value)} at {axis} {step} inside the {rule.reduce.value}"


def reduced(rule: RuleSpec, axis: str, lo: int, hi: int, points: int) -> str:
    return f"{rule.reduce.value} over {axis} {lo}..{hi} ({points} points)"


def reduced_failed(label: str, explained: str) -> str:
    return f"{label}: {explained}"


def reduced_passed(label: str, value: float, bound: str) -> str:
    return f"{label} = {fmt(value)} within {bound}"


# ---- judgement point by point -------------------------------------------------------------
def nonfinite(axis: str, step: int, value: float) -> str:
    return f"non-finite value {fmt(value)} at {axis} {step}"


def nonfinite_after(axis: str, step: int, value: float) -> str:
    """Beside a FAIL: the NaN/Inf that came after it, where judging stopped."""
    return f" (and non-finite value {fmt(value)} at {axis} {step}; later points not judged)"


def needs_window(need: int, selected: int) -> str:
    return f"needs {need} points for its window, has {selected}"


def failed(
    rule: RuleSpec, explained: str, axis: str, step: int, violations: int, judged: int
) -> str:
    """`explained`: the check's explanation of the failing value."""
    streak = f" for {rule.for_} consecutive points" if rule.for_ > 1 else ""
    counts = f"({violations} of {judged} judged points violate)"  # fixed words, see above
    return f"{explained} at {axis} {step}{streak} {counts}"


def passed(
    rule: RuleSpec,
    bound: str,
    axis: str,
    last: tuple[int, float] | None,
    violations: int,
    judged: int,
) -> str:
    step, value = last if last else (None, None)
    what = f"{judged} point" + ("s" if judged != 1 else "")
    tail = f"; last {fmt(value)} at {axis} {step}" if judged > 1 else ""
    if violations:  # debounced: violating points, never `for` of them in a row
        what = f"{judged - violations} of {what}"
        tail += f"; {violations} violating, none for {rule.for_} in a row"
    return f"{what} within {bound}{tail}"


# ---- a metric without points ----------------------------------------------------------------
def waiting(metric: str) -> str:
    return f"waiting for metric {metric}"


def not_logged(absent: list[str]) -> str:
    return f"metric {', '.join(absent)} not logged by this run (if_logged)"


def not_captured_by(capture: Capture) -> str:
    """The reason a source cannot judge a rule, as the verdict line counts it."""
    return f"not captured by {capture.name}"


def not_captured(absent: list[str], capture: Capture, if_logged: bool) -> str:
    """A rule the source can never judge, optional (`if_logged`) or required alike: a skip
    the verdict line counts, never an error that fails every healthy run of the source."""
    marked = " (if_logged)" if if_logged else ""
    return (
        f"metric {', '.join(absent)} {not_captured_by(capture)}{marked}; "
        f"judge it on {capture.instead}"
    )


def no_points_logged(metric: str) -> str:
    return f"metric {metric} is in the run but has no points"


def no_match(pattern: str, available: list[str]) -> str:
    return f"no metric of the run matches {pattern} (the run has {len(available)} metrics)"


def metric_learned_late(metric: str) -> str:
    return f"the run's config named metric {metric} after points of it were judged without it"


def not_in_run(metric: str, available: list[str]) -> str:
    import difflib  # only for a missing metric's "did you mean"

    close = difflib.get_close_matches(metric, available, n=3, cutoff=0.6)
    hint = (
        f"; similar: {', '.join(close)}" if close else f"; the run has {len(available)} metrics"
    )
    return f"metric {metric} is not in the run{hint}"


def summary_unselectable(rule: RuleSpec, value: float) -> str:
    return (
        f"metric {rule.metric} has only a summary value ({fmt(value)}, no steps); "
        f"steps {rule.steps.describe()} cannot select it"
    )


def summary_judged(message: str) -> str:
    return f"summary value (no step): {message.replace(' at summary 0', '')}"
