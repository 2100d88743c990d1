"""Derived metrics: the expression language, its errors, alignment on common steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gatekeeper.errors import PolicyError
from gatekeeper.expr import ExprError, parse_expr
from gatekeeper.model import Series
from gatekeeper.verdict import Status
from tests.checks.util import judge, judge_in_chunks, policy, run_of, series

RATIO = '  - {id: ratio, expr: "perf/rollout_time / perf/train_time", check: {max: 3}}\n'


def test_the_grammar_evaluates_like_numpy():
    e = parse_expr("-max(a, b / 2, 0.5) + abs(`eval/acc@1`) * log(exp(c)) - 1e-1")
    assert e.metrics == ("a", "b", "eval/acc@1", "c")
    got = e.evaluate(
        {
            "a": np.array([1.0, -1.0]),
            "b": np.array([4.0, 0.0]),
            "eval/acc@1": np.array([-2.0, 3.0]),
            "c": np.array([1.0, 2.0]),
        }
    )
    np.testing.assert_allclose(got, [-2.0 + 2.0 - 0.1, -0.5 + 6.0 - 0.1])
    assert parse_expr("train/a/2").metrics == ("train/a",)  # '/' before a number divides


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a +", "column 4, got the end"),
        ("(a / b", "expected ')'"),
        ("a b", "an operator or the end"),
        ("__import__('os')", 'unexpected character "\'"'),
        ("open(a)", "unknown function 'open'"),
        ("abs(a, b)", "abs() takes one argument"),
        ("max(a)", "max() takes two or more"),
        ("2 * 3", "reads no metric"),
        ("a ** 2", "got '*'"),
    ],
)
def test_anything_but_the_grammar_is_refused(text, why):
    with pytest.raises(ExprError) as err:
        parse_expr(text)
    assert why in str(err.value)


def test_a_bad_expression_names_the_policy_line(tmp_path):
    rules = (
        "  - {id: ok, metric: m, check: {max: 1}}\n  - {id: bad, expr: 'a / (b', check: {max: 1}}\n"
    )
    with pytest.raises(PolicyError, match=r"p.yaml:5: rules\[1\].expr: expected '\)'"):
        policy(tmp_path, rules)
    with pytest.raises(PolicyError, match="exactly one of metric or expr"):
        policy(tmp_path, "  - {id: r, metric: m, expr: m * 2, check: {max: 1}}\n", name="q")


def test_operands_on_different_steps_align_on_common_steps(tmp_path):
    rollout = series("perf/rollout_time", [10, 20, 30, 40, 50], [0, 1, 2, 3, 4], "rollout/step")
    train = series("perf/train_time", [5, 5, 5], [0, 2, 4], "rollout/step")
    r = judge(policy(tmp_path, RATIO), run_of(rollout, train))
    assert r.status is Status.FAIL and r.step == 2 and r.value == 6.0 and r.judged == 3
    assert r.metric == "perf/rollout_time / perf/train_time"
    # polled point by point, the unmatched tails wait for their partners
    chunked = judge_in_chunks(policy(tmp_path, RATIO), run_of(rollout, train), 1)
    assert (chunked.step, chunked.value, chunked.judged) == (2, 6.0, 3)


def test_missing_input_and_no_common_step(tmp_path):
    pol = policy(tmp_path, RATIO)
    only = run_of(series("perf/rollout_time", [1.0]))
    assert judge(pol, only, final=False).status is Status.PENDING
    r = judge(pol, only)
    assert r.status is Status.ERROR and "input perf/train_time not in the run" in r.message
    apart = run_of(series("perf/rollout_time", [1.0], [0]), series("perf/train_time", [1.0], [1]))
    assert "share no step" in judge(pol, apart).message


def test_division_by_zero_is_an_error_not_a_pass(tmp_path):
    run = run_of(series("perf/rollout_time", [1.0, 1.0]), series("perf/train_time", [1.0, 0.0]))
    r = judge(policy(tmp_path, RATIO), run)
    assert r.status is Status.ERROR and r.step == 1 and math.isinf(r.value)


def test_windowed_checks_read_derived_metrics(tmp_path):
    n = 100
    a = Series.from_lists("a", range(n), [1.0] * n)
    b = Series.from_lists("b", range(n), [2.0] * 50 + [2.0 + 0.1 * i for i in range(50)])
    rule = "  - {id: t, expr: 'b - a', check: {trend: {window: 10, max_slope: 0.05}}}\n"
    r = judge(policy(tmp_path, rule), run_of(a, b))
    assert r.status is Status.FAIL and 50 < r.step < 60
