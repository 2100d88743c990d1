"""The built-in `run-state` result: how the run ended is part of the verdict. Pure.

A run whose source says it failed, crashed or was killed cannot pass by default, and
neither can a run judged as final that visibly never reached its end (a wandb log with
no exit record). A policy (`allow_states`) or a flag (`--allow-state STATE:REASON`)
relaxes a state with a reason, shown like any override. A source that records no
end state (miles' JSONL records) is judged on its data alone: no result.
"""

from __future__ import annotations

from gatekeeper.model import Run, RunState
from gatekeeper.verdict import Mode, RuleResult, Severity, Status

POLICY = "gatekeeper"
RULE = "run-state"
BAD_STATES = (RunState.FAILED, RunState.CRASHED, RunState.KILLED)
ALLOWABLE = tuple(s.value for s in (*BAD_STATES, RunState.RUNNING))


def state_text(run: Run) -> str:
    """`failed (exit code 1)` — the state as the verdict line shows it."""
    detail = f" ({run.state_detail})" if run.state_detail else ""
    return f"{run.state.value}{detail}"


def run_state_result(
    run: Run, *, final: bool, allowed: dict[str, str] | None = None
) -> RuleResult | None:
    """ERROR for a bad or incomplete end, SKIP when relaxed (by `allowed`, from policies,
    or the run's own `allowed_states`, from the command line), None when there is
    nothing to say."""
    if not final:
        return None  # live: the run has not ended yet, its data is judged by the rules
    if run.state in BAD_STATES:
        message = f"run state: {state_text(run)}; a {run.state.value} run cannot pass"
    elif run.state.is_live and run.carries_state:
        message = (
            f"run is incomplete: judged as final, but the source has no end of run "
            f"({state_text(run)}); it may have been killed or still be writing"
        )
    else:
        return None
    key = run.state.value
    reason = run.allowed_states.get(key) or (allowed or {}).get(key)
    status = Status.ERROR if reason is None else Status.SKIP
    if reason is not None:
        message = f"{message} — allowed: {reason}"
    return RuleResult(
        policy=POLICY,
        rule=RULE,
        status=status,
        severity=Severity.FAIL,
        mode=Mode.ENFORCE,
        metric="",
        message=message,
        source="run state",
        expected="finished",
        override=reason,
        description="how the run ended (relax with --allow-state STATE:REASON)",
    )


def parse_allow_state(text: str) -> tuple[str, str]:
    """`crashed:REASON` -> ("crashed", "REASON"); ValueError naming what is accepted."""
    state, sep, reason = text.partition(":")
    state = state.strip().lower()
    if state == "incomplete":
        state = RunState.RUNNING.value
    if state not in ALLOWABLE or not sep or not reason.strip():
        raise ValueError(
            f"--allow-state {text!r}: expected STATE:REASON with STATE one of "
            f"{', '.join(ALLOWABLE)} (or incomplete), e.g. --allow-state 'crashed:OOM at "
            "step 110 is tracked in #42'"
        )
    return state, reason.strip()
