"""The history identity follows the stage the run executed on (G13), side by side with
miles' gate as of radixark/miles fa787d5958a9d065077d2f08b92af6581c369f9f (PR #2702,
`evaluate_gate(..., executing_suite=)`), dispatch from 107731c3c842 (#2703) and the
`hardware=` declaration from 5433d57fe9f7 (#2701); the mirror is tests/history/miles_ref.py.

A test homed on stage-c-8-gpu-h200 that supports Hopper and Blackwell is dispatched to
stage-c-8-gpu-b200 by a run-on-blackwell PR. Its numbers belong to the B200 series: on
the Hopper series the same healthy Blackwell run would read as a drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from gatekeeper.history.miles import identity_from_path, series_of
from tests.helpers import gatekeeper
from tests.history import miles_ref
from tests.history.test_miles_pack import PACK, RULE_OF, TEST_PATH, capture_run, rule_status

HOME = "stage-c-8-gpu-h200"


def checkout_with(root: Path, hardware: list[str] | None) -> Path:
    test = root / "miles" / TEST_PATH
    test.parent.mkdir(parents=True, exist_ok=True)
    hw = "" if hardware is None else f", hardware={hardware!r}"
    test.write_text(
        "from tests.ci.ci_register import register_cuda_ci\n"
        "from tests.ci.metric_history.register import register_ci_gate\n"
        f'register_cuda_ci(est_time=300, suite="{HOME}"{hw})\n'
        'register_ci_gate(metric_key="train/grad_norm")\n'
    )
    return root / "miles"


def test_the_dispatched_run_is_judged_in_its_executing_stage_series(tmp_path):
    hardware = ["hopper", "blackwell"]
    checkout = checkout_with(tmp_path, hardware)
    (b200,) = miles_ref.executing_stages(HOME, hardware, requested=frozenset({"blackwell"}),
                                         absorb=True)
    assert b200 == "stage-c-8-gpu-b200"
    assert miles_ref.executing_stages(HOME, hardware) == {HOME}  # a plain PR: at home
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    declared = ["train/grad_norm"]
    # Hopper nightlies at home, Blackwell nightlies on B200 (grad_norm ~3x on Blackwell)
    for i in (1, 2, 3):
        for stage, scale in ((HOME, 1.0), (b200, 3.0)):
            record = capture_run(tmp_path / f"{stage}{i}", seed=400 + i, grad_scale=scale)
            ident = miles_ref.run_identity(TEST_PATH, stage)
            mv = miles_ref.evaluate(miles, ident, record, declared=declared)
            miles.write_run(ident, f"c{i}", f"2026-04-{i:02d}T0{scale:.0f}:00:00.000000+00:00",
                            miles_ref.trusted(mv), miles_ref.values_to_write(record, mv))
    miles.close()
    url = str(tmp_path / "gk.db")
    assert gatekeeper("history", "import", str(tmp_path / "miles.db"), "--history",
                      url).returncode == 0

    candidate = capture_run(tmp_path / "cand", seed=9, grad_scale=3.0)  # healthy, on B200
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    mv = miles_ref.evaluate(miles, miles_ref.run_identity(TEST_PATH, b200), candidate,
                            declared=declared)
    # what #2702 fixed: keyed on the registered suite the same run is a drift
    before_fix = miles_ref.evaluate(miles, miles_ref.run_identity(TEST_PATH, HOME), candidate,
                                    declared=declared)
    miles.close()
    assert rule_status(mv["train/grad_norm"]) == "pass"
    assert rule_status(before_fix["train/grad_norm"]) == "fail"

    out = tmp_path / "v.json"
    res = gatekeeper("check", candidate, "-p", PACK, "--history", url, "--config",
                     f"suite={b200}", "--json", str(out), cwd=checkout)
    assert res.returncode == 0, res.stdout + res.stderr
    verdict = json.loads(out.read_text())
    got = {r["rule"]: r["status"] for r in verdict["results"]}
    assert got["grad-norm"] == rule_status(mv["train/grad_norm"]) == "pass"
    assert got == {**{r: "skip" for r in RULE_OF.values()}, "grad-norm": "pass"}
    assert verdict["run"]["history"]["series"] == series_of(TEST_PATH, "cuda", b200)

    # the stage is not guessed: a test that may run on two generations needs it given
    ident = identity_from_path(candidate, str(checkout))
    assert ident == {"test_path": TEST_PATH, "backend": "cuda"}
    unsaid = gatekeeper("check", candidate, "-p", PACK, "--history", url, cwd=checkout)
    assert unsaid.returncode == 2, unsaid.stdout + unsaid.stderr
    assert "series key 'config.suite' is not set" in unsaid.stderr
    assert "--config suite=VALUE" in unsaid.stderr


def test_a_test_that_cannot_leave_home_keys_on_its_home_stage(tmp_path):
    record = capture_run(tmp_path / "records", seed=1)
    for hardware in (["hopper"], None):  # one arch; or a checkout before #2701
        checkout = checkout_with(tmp_path / str(hardware), hardware)
        assert miles_ref.executing_stages(
            HOME, hardware or ["hopper"], requested=frozenset({"blackwell"}), absorb=True
        ) == set()  # a Blackwell request does not move it: it does not run at all
        assert identity_from_path(record, str(checkout)) == {
            "test_path": TEST_PATH, "backend": "cuda", "suite": HOME}
        out = tmp_path / "v.json"
        res = gatekeeper("check", record, "-p", PACK, "--history", str(tmp_path / "gk.db"),
                         "--json", str(out), cwd=checkout)
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads(out.read_text())["run"]["history"]["series"] == series_of(
            TEST_PATH, "cuda", HOME)
