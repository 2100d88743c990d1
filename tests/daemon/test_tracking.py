"""Debounced rule statuses, and the stored verdict matching Verdict.to_dict()."""

from __future__ import annotations

import json

import pytest

from gatekeeper.daemon.tracking import track
from gatekeeper.engine import evaluate
from gatekeeper.policy.loader import load_policies
from gatekeeper.sources import open_source
from gatekeeper.verdict import Mode, RuleResult, Severity, Status, Verdict
from tests.helpers import REPO


def res(status: Status) -> RuleResult:
    return RuleResult(
        "p", "r", status, Severity.FAIL, Mode.ENFORCE, "m", f"is {status.value}", "f:1"
    )


def test_a_new_status_counts_only_after_debounce_polls_and_since_marks_its_start() -> None:
    rows = {}
    seen = []
    for t, status in enumerate([Status.PASS, Status.FAIL, Status.PASS, Status.FAIL, Status.FAIL]):
        (row,) = track(rows, [res(status)], debounce=2, final=False, now=float(t))
        rows = {("p", "r"): row}
        seen.append((row.status, row.since))
    # pass needs two polls too; a lone fail at t=1 is noise; fail confirmed at t=4
    assert seen == [
        ("pending", 0.0),
        ("pending", 0.0),
        ("pending", 0.0),
        ("pending", 0.0),
        ("fail", 4.0),
    ]


def test_a_final_verdict_confirms_at_once() -> None:
    (row,) = track({}, [res(Status.ERROR)], debounce=5, final=True, now=9.0)
    assert (row.status, row.since) == ("error", 9.0)


def test_a_row_is_given_again_only_when_nothing_of_it_changed() -> None:
    """`track` gives the committed row itself when the poll changes nothing of it (the
    daemon then writes no row): random statuses, messages and severities over polls, and
    each row must say this poll's message and severity, hold a differing status as the
    candidate, and be the committed row exactly when it equals it."""
    import random
    from dataclasses import replace

    rng, rows, kept = random.Random(3), {}, 0
    for t in range(400):
        result = replace(
            res(rng.choice([Status.PASS, Status.PASS, Status.FAIL, Status.ERROR])),
            message=rng.choice(["a", "a", "b"]),
            severity=rng.choice([Severity.FAIL, Severity.FAIL, Severity.WARN]),
        )
        debounce = rng.choice([1, 2, 3])
        (row,) = track(rows, [result], debounce=debounce, final=t % 50 == 49, now=float(t))
        old = rows.get(("p", "r"))
        assert (row.message, row.severity) == (result.message, result.severity.value)
        if row.status == result.status.value:
            assert (row.candidate, row.candidate_count) == (None, 0)
        else:
            assert row.candidate == result.status.value and row.candidate_count > 0
        assert (row is old) == (row == old)
        kept += row is old
        rows = {("p", "r"): row}
    assert 0 < kept < 400


@pytest.mark.parametrize("run", ["healthy", "broken-kl", "rows.jsonl"])
def test_a_stored_verdict_is_verdict_to_dict_and_reads_back(run: str) -> None:
    """The daemon stores `Verdict.to_dict()` (the one serialization): plain JSON that
    `Verdict.from_dict` reads back to the same verdict."""
    policies = load_policies([str(REPO / "policies")])
    verdict = evaluate(policies, open_source(str(REPO / "examples" / "runs" / run)).read())
    text = json.dumps(verdict.to_dict(), allow_nan=False)
    again = Verdict.from_dict(json.loads(text))
    assert again.to_dict() == verdict.to_dict()
