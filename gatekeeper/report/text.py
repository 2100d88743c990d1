"""Shared wording for reporters: one-line verdicts and cell formatting."""

from __future__ import annotations

from gatekeeper.errors import one_line
from gatekeeper.fmt import fmt
from gatekeeper.verdict import RuleResult, Status, Verdict

ORDER = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.PENDING: 3, Status.PASS: 4,
         Status.SKIP: 5}


def ordered(results: list[RuleResult]) -> list[RuleResult]:
    """Gating failures and errors first, then by status, keeping policy order within."""
    return sorted(results, key=lambda r: (not r.gating, ORDER[r.status]))


def step_text(r: RuleResult) -> str:
    if r.step is None:
        return "-"
    return f"{r.step_key}={r.step}" if r.step_key and r.step_key != "step" else str(r.step)


def value_text(r: RuleResult) -> str:
    return fmt(r.value) if r.value is not None else "-"


def result_line(r: RuleResult) -> str:
    """`miles-ci/ppo-kl-step0 fail: |x| = 0.3 > 1e-09 at train/step 0 (policies/x.yaml:12)`."""
    extra = f" [override: {r.override}]" if r.override else ""
    return f"{r.policy}/{r.rule} {r.status.value}: {r.message}{extra} ({r.source})"


def summary_line(v: Verdict) -> str:
    counts = v.counts()
    parts = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    name = v.run.get("name", "run")
    state = v.run.get("state")
    if state and state != "unknown":  # sources that record how a run ends (wandb)
        detail = v.run.get("state_detail")
        name = f"{name} (run state: {state}{f', {detail}' if detail else ''})"
    head = {
        "pass": "PASSED",
        "fail": "FAILED",
        "error": f"FAILED ({_error_kinds(v)})",
        "pending": "PENDING",
        "nothing_judged": "NOTHING JUDGED",
    }[v.status.value]
    failing = v.failing()
    why = ""
    if failing:
        shown = ", ".join(f"{r.policy}/{r.rule}" for r in failing[:3])
        more = f" +{len(failing) - 3} more" if len(failing) > 3 else ""
        why = f" — failing: {shown}{more}"
    elif v.nothing_judged:
        allowed = f"nothing judged (allowed: {v.nothing_allowed}): " if v.nothing_allowed else ""
        why = f" — {allowed}{nothing_judged_text(v)}"
    stopped = f" — {stopped_text(v.stopped)}" if v.stopped else ""
    unjudged = not_judged_text(v)
    why += f" — {unjudged}" if unjudged else ""
    command = command_text(v)
    if command and v.status.value == "pass":
        head, command = f"{head}, but {command}", ""
    tail = f" — {command}" if command else ""
    # one line whatever the run's name holds: a newline could start a workflow command
    return one_line(f"gate {head}: {name}: {parts or 'no rules'}{why}{stopped}{tail}")


def command_text(v: Verdict) -> str:
    """How `run`'s command ended, when it did not succeed and no stop report says so
    already: the exit code is then CMD's (gate passed) or 1, and the line must tell why."""
    code = v.run.get("command_exit_code")
    if not code or v.stopped:
        return ""
    killed = v.run.get("command_signal")
    return f"CMD was killed by {killed} ({code})" if killed else f"CMD exited {code}"


def not_judged_text(v: Verdict) -> str:
    """The skips no run of this source could avoid, by reason: `8 rules not judged: not
    captured by the CI record`. Said on the line, so a run that judged only what the source
    carries never reads as judged whole."""
    return "; ".join(
        f"{n} rule{'s' if n != 1 else ''} not judged: {reason}"
        for reason, n in v.not_judged().items()
    )


def nothing_judged_text(v: Verdict, most: int = 3) -> str:
    """Why a final verdict judged nothing: each skip reason of the gating rules with the
    rules it covers (at most `most` of each), or that there is no gating rule at all."""
    enforced = [r for r in v.results if r.enforced]  # all skipped, or nothing judged
    if not enforced:
        others = f" ({len(v.results)} warn-severity or shadow-mode)" if v.results else ""
        return f"no enforce-mode, fail-severity rule to judge{others}"
    by_reason: dict[str, list[str]] = {}
    for r in enforced:
        by_reason.setdefault(r.message, []).append(f"{r.policy}/{r.rule}")
    parts = []
    for reason, rules in list(by_reason.items())[:most]:
        more = f" +{len(rules) - most} more" if len(rules) > most else ""
        parts.append(f"{', '.join(rules[:most])}{more} ({reason})")
    left = len(by_reason) - most
    tail = f"; +{left} more reason{'s' if left != 1 else ''}" if left > 0 else ""
    n = len(enforced)
    lead = f"all {n} gating rules skipped" if n > 1 else "the one gating rule skipped"
    return f"{lead}: " + "; ".join(parts) + tail


def _error_kinds(v: Verdict) -> str:
    """What the gating errors are: a NaN or a failed run is the finding, not a failure to
    judge, so the line names the kinds instead of "could not judge"."""
    kinds: list[str] = []
    for r in v.failing():
        kind = (
            "run state" if r.rule == "run-state"
            else "non-finite values" if "non-finite" in r.message
            else "missing or incomplete data"
        )
        if kind not in kinds:
            kinds.append(kind)
    return "errors: " + ", ".join(kinds)


def stopped_text(stopped: dict[str, object]) -> str:
    """When and why a live run was stopped: `run stopped at train/step 41 (violation at
    train/step 3; 2026-... UTC, 41.2 s in) by miles/kl: value 0.3; command exit status 143`.
    The violating step may be far behind the run: both are shown."""
    key, step = stopped.get("step_key") or "step", stopped.get("step")
    last_key, last = stopped.get("last_step_key") or key, stopped.get("last_step")
    where = f"{last_key} {last}" if last is not None else f"{key} {step}"
    if last is None and step is None:
        where = "no step"
    violation = f"violation at {key} {step}; " if step is not None and last is not None else ""
    when = f"{violation}{stopped.get('time', '?')}, {stopped.get('elapsed_seconds', '?')} s in"
    rule = stopped.get("rule")
    why = f" by {rule}" if rule else f" ({stopped.get('reason', 'stopped')})"
    value = stopped.get("value")
    shown = f": value {value}" if value is not None else ""
    if step is None and stopped.get("message"):
        shown = f": {stopped['message']}"  # e.g. a share of points, not a value at a step
    code = stopped.get("exit_code")
    exited = f"; command exit status {code}" if code is not None else ""
    return f"run stopped at {where} ({when}){why}{shown}{exited}"
