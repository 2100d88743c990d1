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


def message_text(r: RuleResult) -> str:
    """The rule's message with its override's reason, said once: a rule switched off says
    the reason in its message already (`switched off by override: REASON`)."""
    if r.override and r.override not in r.message:
        return f"{r.message} [override: {r.override}]"
    return r.message


def result_line(r: RuleResult) -> str:
    """`miles-ci/ppo-kl-step0 fail: |x| = 0.3 > 1e-09 at train/step 0 (policies/x.yaml:12)`."""
    return f"{r.policy}/{r.rule} {r.status.value}: {message_text(r)} ({r.source})"


def counts_text(v: Verdict) -> str:
    """`23 pass, 2 fail, 46 skip (3 overridden)`: each status with its count, and how many
    of those results an override changed (off, warn, another check) — a gate passing with
    its rules relaxed must say so wherever its verdict is."""
    counts = v.counts()
    parts = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no rules"
    overridden = v.overridden()
    return f"{parts} ({overridden} overridden)" if overridden else parts


def verdict_line(v: Verdict) -> str:
    """The console's first line: `gate FAILED: RUN: 23 pass, 2 fail, 46 skip`. It carries
    the outcome, the run (with its recorded end state) and the counts; why and what else
    (`detail_lines`) go on the lines below."""
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
    command = command_text(v)
    if command and v.status.value == "pass":  # the exit code is CMD's: the line says why
        head = f"{head}, but {command}"
    # one line whatever the run's name holds: a newline could start a workflow command
    return one_line(f"gate {head}: {name}: {counts_text(v)}")


def detail_lines(v: Verdict) -> list[str]:
    """What the verdict line leaves out, one fact a line: why nothing was judged, the
    skips the source could not avoid (`19 rules not judged: not captured by the CI
    record`), when a live run was stopped, how a failing run's CMD ended."""
    lines = []
    if v.nothing_judged and not v.failing():
        allowed = f"nothing judged (allowed: {v.nothing_allowed}): " if v.nothing_allowed else ""
        lines.append(f"{allowed}{nothing_judged_text(v)}")
    unjudged = not_judged_text(v)
    if unjudged:
        lines.append(unjudged)
    if v.stopped:
        lines.append(stopped_text(v.stopped))
    command = command_text(v)
    if command and v.status.value != "pass":
        lines.append(command)
    return [one_line(line) for line in lines]


def summary_line(v: Verdict) -> str:
    """The verdict in one line, for reports that have one line for it (a JUnit message,
    an annotation, the HTML report's header): the verdict line, the failing rules (3
    named) and the detail lines, joined by ` — `."""
    failing = v.failing()
    why = []
    if failing:
        shown = ", ".join(f"{r.policy}/{r.rule}" for r in failing[:3])
        more = f" +{len(failing) - 3} more" if len(failing) > 3 else ""
        why.append(f"failing: {shown}{more}")
    return " — ".join([verdict_line(v), *why, *detail_lines(v)])


def finding_lines(v: Verdict, *, warnings: bool = True, overrides: bool = True) -> list[str]:
    """One line per failed or errored rule (and, asked, per warning and per overridden
    rule), gating ones first: `FAIL policy/rule: message (file:line)`. Plain text: the
    console report and `-q` colour the status word themselves."""
    return [
        one_line(f"{r.status.value.upper()}{' (shadow)' if r.mode.value == 'shadow' else ''} "
                 f"{r.policy}/{r.rule}: {message_text(r)} ({r.source})")
        for r in listed(v, warnings=warnings, overrides=overrides)
    ]


def listed(v: Verdict, *, warnings: bool = True, overrides: bool = True) -> list[RuleResult]:
    """The results the short console report lists under the verdict line, in order."""
    shown = {Status.FAIL, Status.ERROR} | ({Status.WARN} if warnings else set())
    return [r for r in ordered(v.results)
            if r.status in shown or (overrides and r.override is not None)]


def quiet_lines(v: Verdict, color: bool = False) -> list[str]:
    """What `-q` prints: the verdict line, each failed or errored rule, the details.
    `color` (report/color.py decides it): the verdict line and each status word in the
    console report's colours, as plain ANSI escapes (-q never imports rich)."""
    head, findings = verdict_line(v), finding_lines(v, warnings=False, overrides=False)
    if color:
        head = _sgr(head, _VERDICT_SGR.get(v.status.value, "1;31"))
        findings = [_sgr(word, _STATUS_SGR[word]) + f" {rest}" for word, rest in
                    (line.split(" ", 1) for line in findings)]
    return [head, *(f"  {line}" for line in findings), *(f"  {line}" for line in detail_lines(v))]


# The console report's styles (report/console.py) as SGR codes: bold green, cyan, yellow;
# a failed verdict and FAIL bold red, ERROR bold magenta.
_VERDICT_SGR = {"pass": "1;32", "pending": "1;36", "nothing_judged": "1;33"}
_STATUS_SGR = {"FAIL": "1;31", "ERROR": "1;35"}


def _sgr(text: str, code: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"


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
