"""The policy-language pieces the miles pack needs: strict bounds, steps {every: ...} from
run config, if_logged, requires_config, isclose against a reference run (miles'
grad-norm replay, radixark/miles 31f1ca9 `check_grad_norm`) and rise (a step difference)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gatekeeper.engine import Evaluation
from gatekeeper.errors import PolicyError
from gatekeeper.model import Run
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series
from tests.helpers import REPO, gatekeeper, write_policy
from tests.miles.capture import Variant, capture_run, merge_attempt


@pytest.mark.parametrize(
    ("check", "value", "status"),
    [
        ("{abs_lt: 1.0e-9}", 1e-9, Status.FAIL),  # miles: abs(x) < 1e-9
        ("{abs_max: 1.0e-9}", 1e-9, Status.PASS),  # inclusive: the fudge strict bounds replace
        ("{abs_lt: 1.0e-9}", -9.9e-10, Status.PASS),
        ("{lt: 1.0}", 1.0, Status.FAIL),  # miles: mtp_loss < 1.0
        ("{lt: 1.0}", 0.999, Status.PASS),
        ("{gt: 0}", 0.0, Status.FAIL),
        ("{strictly_between: [0, 0.7]}", 0.0, Status.FAIL),  # miles: 0 < entropy < 0.7
        ("{strictly_between: [0, 0.7]}", 0.7, Status.FAIL),
        ("{strictly_between: [0, 0.7]}", 0.35, Status.PASS),
    ],
)
def test_strict_bounds(tmp_path: Path, check: str, value: float, status: Status) -> None:
    p = policy(tmp_path, f"  - {{id: r, metric: m, check: {check}}}\n")
    result = judge(p, run_of(series("m", [value])))
    assert result.status is status, result.message


def test_bad_strict_bounds_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"p\.yaml:5: rules\[1\]\.check\.strictly_between"):
        policy(tmp_path, "  - {id: a, metric: m, check: {lt: 1}}\n"
                         "  - {id: b, metric: m, check: {strictly_between: [1, 1]}}\n")
    with pytest.raises(PolicyError, match=r"p\.yaml:4: rules\[0\]\.check\.abs_lt"):
        policy(tmp_path, "  - {id: a, metric: m, check: {abs_lt: 0}}\n")


EVERY = "  - {id: r, metric: m, steps: {every: config.n, default: 1}, check: {abs_lt: 1.0e-9}}\n"


def test_every_reads_its_period_from_config(tmp_path: Path) -> None:
    p = policy(tmp_path, EVERY)
    values = [0.0, 0.3, 0.3, 0.0, 0.3, 0.3, 0.5]  # rollout starts at 0, 3, 6 with n = 3
    run = run_of(series("m", values))
    run.config = {"n": 3}
    result = judge(p, run)
    assert (result.status, result.step) == (Status.FAIL, 6)
    assert judge_in_chunks(p, run, 2).status is Status.FAIL  # live polls agree
    run.config = {}  # default 1: every step is a rollout start
    assert judge(p, run).step == 1
    run.config = {"n": 0}
    bad = judge(p, run)
    assert bad.status is Status.ERROR and "config.n is 0" in bad.message


def test_every_binds_once_live(tmp_path: Path) -> None:
    p = policy(tmp_path, EVERY)
    run = Run(name="r", source="mem", config={"n": 2})
    ev = Evaluation(p)
    ev.feed({"m": series("m", [0.0, 0.4])})
    assert ev.verdict(run, final=False).results[0].status is Status.PASS
    ev.feed({"m": series("m", [0.2], steps=[2])})
    result = ev.verdict(run, final=False).results[0]
    assert (result.status, result.step) == (Status.FAIL, 2)


@pytest.mark.parametrize("bad", ["{every: 0}", "{every: config.}", "{every: 2, default: 1}",
                                 "{every: config.n, default: 0}", "{every: 2, by: 3}"])
def test_bad_every_is_a_policy_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(PolicyError, match=r"p\.yaml:4: rules\[0\]\.steps"):
        policy(tmp_path, f"  - {{id: r, metric: m, steps: {bad}, check: {{max: 1}}}}\n")


def test_if_logged_skips_an_absent_metric_and_judges_a_present_one(tmp_path: Path) -> None:
    p = policy(tmp_path, "  - {id: r, metric: m, check: {max: 1}, if_logged: true}\n"
                         "  - {id: e, expr: 'a - b', check: {abs_max: 0.1}, if_logged: true}\n"
                         "  - {id: plain, metric: m, check: {max: 1}}\n")
    from gatekeeper.engine import evaluate

    absent = {r.rule: r for r in evaluate(p, run_of(series("a", [1.0]))).results}
    assert absent["r"].status is Status.SKIP
    assert "m not logged by this run (if_logged)" in absent["r"].message
    assert absent["e"].status is Status.SKIP and "b not logged" in absent["e"].message
    assert absent["plain"].status is Status.ERROR  # without if_logged: never a silent pass
    present = {r.rule: r for r in evaluate(p, run_of(series("m", [2.0]), series("a", [1.0]),
                                                     series("b", [0.5]))).results}
    assert present["r"].status is Status.FAIL and present["e"].status is Status.FAIL
    nan = {r.rule: r for r in evaluate(p, run_of(series("m", [math.nan]))).results}
    assert nan["r"].status is Status.ERROR
    live = {r.rule: r for r in evaluate(p, run_of(series("a", [1.0])), final=False).results}
    assert live["r"].status is Status.PENDING


def test_requires_config_is_an_error_with_the_flags_to_pass(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", """
        version: 1
        name: p
        requires_config: {lora_rank: 0, multi_latent_attention: false}
        rules:
          - {id: r, metric: m, check: {max: 1}, when: {config.lora_rank: {truthy: false}}}
    """)
    from gatekeeper.engine import evaluate
    from gatekeeper.policy.loader import load_policies

    p = load_policies([str(path)])
    run = run_of(series("m", [0.5]))
    run.config = {"lora_rank": 0}
    (result,) = evaluate(p, run).results
    assert result.status is Status.ERROR
    assert "--config multi_latent_attention=false" in result.message
    run.config["multi_latent_attention"] = False
    assert evaluate(p, run).results[0].status is Status.PASS


def test_per_metric_errors_leave_the_rest_judged(tmp_path: Path) -> None:
    p = policy(tmp_path, "  - {id: a, metric: a, check: {max: 1}}\n"
                         "  - {id: b, metric: b, check: {max: 1}}\n")
    from gatekeeper.engine import evaluate

    run = run_of(series("a", [0.5]), series("b", [0.5]))
    run.metric_errors = {"a": "duplicate train/step 0 (2 points)"}
    results = {r.rule: r for r in evaluate(p, run).results}
    assert results["a"].status is Status.ERROR and "duplicate" in results["a"].message
    assert results["b"].status is Status.PASS


# --- isclose: miles' grad-norm replay -----------------------------------------------------

ISCLOSE = (
    "  - {id: r, metric: g, check: {isclose: {reference: ref, rel_tol: 0.03, abs_tol: 0.03}}}\n"
)


def _replay(tmp_path: Path, run_values, ref_values, ref_steps=None):
    from gatekeeper.engine import evaluate

    p = policy(tmp_path, ISCLOSE)
    ref = run_of(series("g", ref_values, steps=ref_steps))
    (result,) = evaluate(p, run_of(series("g", run_values)), references={"ref": ref}).results
    return result


@pytest.mark.parametrize(
    ("value", "ref"),
    [(1.0, 1.03), (1.0, 1.031), (1.0, 1.0309), (0.01, 0.04), (0.01, 0.0401), (10.0, 10.31),
     (10.0, 10.3), (-1.0, -1.0309), (5.0, 5.155), (5.0, 5.1546)],
)
def test_isclose_agrees_with_math_isclose(tmp_path: Path, value: float, ref: float) -> None:
    result = _replay(tmp_path, [0.2, value], [0.2, ref])
    expected = math.isclose(value, ref, rel_tol=0.03, abs_tol=0.03)
    assert (result.status is Status.PASS) == expected, result.message
    if not expected:
        assert result.status is Status.FAIL and result.step == 1


def test_isclose_errors(tmp_path: Path) -> None:
    missing_step = _replay(tmp_path, [0.2, 0.2, 0.2], [0.2, 0.2])
    assert missing_step.status is Status.ERROR and "no g at step 2" in missing_step.message
    from gatekeeper.engine import evaluate

    p = policy(tmp_path, ISCLOSE)
    (no_ref,) = evaluate(p, run_of(series("g", [0.2]))).results
    assert no_ref.status is Status.ERROR and "--reference ref=PATH" in no_ref.message
    shorter_run = _replay(tmp_path, [0.2], [0.2, 5.0])  # miles never loads step 1: fine
    assert shorter_run.status is Status.PASS


def test_grad_norm_replay_from_the_command_line(tmp_path: Path) -> None:
    """Run 1 saved; run 2 replays with grad norms 2% off (passes) or 5% off at one step."""
    v = Variant()
    first = merge_attempt(capture_run(tmp_path / "a" / "attempt-0", v), tmp_path / "a.jsonl")

    def scaled(step: int, factor: float):
        def edit(process: str, m: dict) -> None:
            if process == "trainer":
                m["train/grad_norm"] *= factor if m["train/step"] == step else 1.02
        return edit

    flags = [*v.config_flags(), "--config", "ci_load_grad_norm=true",
             "-p", str(REPO / "policies" / "miles")]
    close = capture_run(tmp_path / "b" / "attempt-0", v, edit=scaled(0, 1.02))
    ok = gatekeeper("check", str(close), *flags, "--reference", f"grad-norm={first}")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr
    off = capture_run(tmp_path / "c" / "attempt-0", v, edit=scaled(4, 1.2))
    bad = gatekeeper("check", str(off), *flags, "--reference", f"grad-norm={first}", "-q")
    assert bad.returncode == 1 and "grad-norm-matches-reference" in bad.stdout
    none = gatekeeper("check", str(off), *flags, "-q")
    assert none.returncode == 1 and "grad-norm-matches-reference" in none.stdout
    typo = gatekeeper("check", str(off), *flags, "--reference", "grad-norm")
    assert typo.returncode == 2 and "NAME=SOURCE" in typo.stderr


# --- rise: "by step N the value rose by >= d over its value at step M" -----------------------

RISE = "  - {id: r, metric: eval/aime, check: {rise: {from_step: 0, by_step: 9, min: 0.06}}}\n"


@pytest.mark.parametrize(
    ("values", "status", "step"),
    [
        ([0.30, 0.31, 0.33, 0.36], Status.PASS, 3),  # +0.06 at step 3
        ([0.30] + [0.35] * 9 + [0.50], Status.FAIL, 1),  # +0.2 only after step 9
        ([0.30, 0.25, 0.20] + [0.2] * 7, Status.FAIL, 1),  # fell (best: step 1)
    ],
)
def test_rise(tmp_path: Path, values, status: Status, step: int) -> None:
    p = policy(tmp_path, RISE)
    result = judge(p, run_of(series("eval/aime", values, step_key="eval/step")))
    assert (result.status, result.step) == (status, step), result.message
    chunked = judge_in_chunks(p, run_of(series("eval/aime", values, step_key="eval/step")), 2)
    assert chunked.status is status


def test_a_run_that_ended_before_by_step_is_skipped_not_failed(tmp_path: Path) -> None:
    p = policy(tmp_path, RISE)
    result = judge(p, run_of(series("eval/aime", [0.30, 0.31, 0.32], step_key="eval/step")))
    assert result.status is Status.SKIP and "ended at step 2, before step 9" in result.message
    risen = judge(p, run_of(series("eval/aime", [0.30, 0.36], step_key="eval/step")))
    assert risen.status is Status.PASS  # a rise before the end passes however short the run


def test_rise_needs_its_starting_value(tmp_path: Path) -> None:
    p = policy(tmp_path, RISE)
    result = judge(p, run_of(series("eval/aime", [0.3, 0.5], steps=[1, 2])))
    assert result.status is Status.ERROR and "no value at step 0" in result.message
    live = judge(p, run_of(series("eval/aime", [0.3, 0.32], steps=[0, 2])), final=False)
    assert live.status is Status.PENDING
    with pytest.raises(PolicyError, match="by_step"):
        policy(tmp_path, "  - {id: r, metric: m, "
                         "check: {rise: {from_step: 3, by_step: 3, min: 0.1}}}\n")


def test_kimi_k3_recipe_rise(tmp_path: Path) -> None:
    """miles logs eval points at eval/step = the rollout id; the recipe evaluates every 10
    rollouts, so eval@9 is eval/step 90 (issue 27 G17)."""
    from gatekeeper.engine import evaluate
    from gatekeeper.policy.loader import load_policies

    p = load_policies([str(REPO / "policies" / "recipes" / "kimi-k3.yaml")])
    aime = [0.40, 0.41, 0.43, 0.44, 0.45, 0.455, 0.457, 0.458, 0.459, 0.459, 0.52]
    steps = [10 * i for i in range(len(aime))]

    def judged(config: dict) -> object:
        run = run_of(series("eval/aime", aime, steps, step_key="eval/step"))
        run.config = config
        (result,) = evaluate(p, run).results
        return result

    k3 = {"recipe": "kimi-k3", "eval_interval": 10}
    result = judged(k3)
    assert result.status is Status.FAIL and "rose only 0.059 < 0.06 by step 90" in result.message
    aime[9] = 0.4601
    assert judged({"eval_interval": 10}).status is Status.SKIP  # another recipe's run
    result = judged(k3)
    assert (result.status, result.step) == (Status.PASS, 90)


def test_every_tries_its_sources_in_order(tmp_path: Path) -> None:
    p = policy(tmp_path, "  - id: r\n    metric: m\n    check: {abs_lt: 1.0e-9}\n"
                         "    steps:\n      every: [config.n, 'config.a * config.b / config.c']\n")
    values = [0.0, 0.3, 0.0, 0.3, 0.5, 0.0]
    run = run_of(series("m", values))
    run.config = {"n": None, "a": 8, "b": 4, "c": 16}  # n null: 8 * 4 / 16 = 2
    assert (judge(p, run).status, judge(p, run).step) == (Status.FAIL, 4)
    run.config = {"n": 5, "a": 8, "b": 4, "c": 16}  # n set: it wins
    assert judge(p, run).status is Status.PASS
    run.config = {"a": 8, "b": 4, "c": 12}
    bad = judge(p, run)
    assert bad.status is Status.ERROR and "is 2.66667" in bad.message
    run.config = {"n": "four"}
    assert "must be numbers" in judge(p, run).message
    run.config = {}
    assert "sets none of config.n" in judge(p, run).message


def test_every_reads_only_config(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"p\.yaml:4: rules\[0\]\.steps.*train/loss"):
        policy(tmp_path, "  - {id: r, metric: m, steps: {every: 'train/loss * 2'}, "
                         "check: {max: 1}}\n")
