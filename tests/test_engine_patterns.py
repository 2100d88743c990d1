"""Rules on more than one fixed metric name: a metric pattern (`eval/*/x`, one result per
matching metric), `metric: config.KEY` (the metric the run's config names) and the
`present_at` check (a point at every step of other metrics). Whole and live alike, and
through a saved state (the daemon's)."""

from __future__ import annotations

import json
import math

import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.errors import PolicyError
from gatekeeper.model import Capture, Run, Series
from gatekeeper.policy.patterns import expanded_id, matches, template_id
from gatekeeper.statedata import StateDataError
from gatekeeper.verdict import Status
from tests.test_engine import policy

TITO = "tito_session_mismatch_rate/v2/special_token_count"
PATTERN = f"  - {{id: tito, metric: 'eval/*/{TITO}', check: {{abs_max: 0}}{{extra}}}}\n"


def rule(extra: str = "") -> str:
    return PATTERN.replace("{extra}", extra)


def run_of(metrics: dict[str, list[tuple[int, float]]], axis: str = "eval/step", **meta) -> Run:
    series = {
        m: Series.from_lists(m, [s for s, _ in pts], [v for _, v in pts], axis)
        for m, pts in metrics.items()
    }
    return Run(name="r", source="mem", series=series, **meta)


def by_rule(verdict) -> dict[str, object]:
    return {r.rule: r for r in verdict.results}


def live(policies, run: Run, *, saved: bool = False):
    """The run fed point by point, step order, as a live watcher does; `saved`: the
    evaluation is bounded, saved and restored (as JSON) between polls, as the daemon's."""
    ev = Evaluation(policies, bounded=saved)
    steps = sorted({int(s) for x in run.series.values() for s in x.steps})
    for step in steps:
        part = {}
        for name, s in run.series.items():
            keep = s.steps == step
            if keep.any():
                part[name] = Series(name, s.steps[keep], s.values[keep], s.step_key)
        if saved:
            ev = Evaluation.from_state(policies, json.loads(json.dumps(ev.to_state())))
        ev.feed(part, run)
    return ev.verdict(run, final=True)


def same(a, b) -> None:
    assert [(r.rule, r.metric, r.status, r.step, r.message) for r in a.results] == [
        (r.rule, r.metric, r.status, r.step, r.message) for r in b.results
    ]


# ---- patterns --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "hit"), [
    (f"eval/aime/{TITO}", True),
    (f"eval/gsm8k-hard/{TITO}", True),
    (f"eval/a/b/{TITO}", False),  # * is one path segment
    (f"eval//{TITO}", True),  # an empty segment is a segment
    (f"rollout/{TITO}", False),
    (f"eval/aime/{TITO}/x", False),  # the whole name matches, not a prefix
])
def test_a_star_matches_one_path_segment(name: str, hit: bool) -> None:
    assert matches(f"eval/*/{TITO}", name) is hit


def test_other_characters_are_themselves() -> None:
    assert matches("eval/skipped_*", "eval/skipped_ckpt_missing")
    assert not matches("a.b/*", "aXb/c")  # . is no regex dot
    assert matches("m[1]/*", "m[1]/x") and not matches("m[1]/*", "m1/x")
    assert template_id(expanded_id("r", "eval/a/x")) == "r" and template_id("r") == "r"


@pytest.mark.parametrize(("pattern", "name", "hit"), [
    ("a*b*c", "abc", True), ("a*b*c", "aXbYc", True), ("a*b*c", "acb", False),
    ("ab*ba", "aba", False),  # the ends may not overlap
    ("*a*", "", False), ("*", "", True), ("**", "x", True), ("x*x*x", "xxx", True),
    ("a*/b*", "a1/b2", True), ("a*/b*", "a1/x/b2", False),
])
def test_stars_within_a_segment(pattern: str, name: str, hit: bool) -> None:
    assert matches(pattern, name) is hit


def test_a_pattern_of_many_stars_matches_in_linear_time() -> None:
    """A backtracking regex took 4 s for `a*` x 10 + `b` on a 40-character name, and
    grows as the name's length to the power of the stars: a policy and a long metric name
    could hang `check` and the daemon. Segments are now matched by finding each fixed
    piece leftmost in turn."""
    import time

    start = time.perf_counter()
    assert not matches("a*" * 30 + "b", "a" * 100_000)
    assert matches("a*" * 30 + "b", "a" * 100_000 + "b")
    # ~1 ms; a guard against a hang, not a speed budget (the regex would not end)
    assert time.perf_counter() - start < 10.0


def test_a_pattern_rule_is_judged_on_every_matching_metric_each_its_own_result(tmp_path):
    run = run_of({f"eval/aime/{TITO}": [(0, 0.0), (1, 0.5)], f"eval/gsm8k/{TITO}": [(0, 0.0)],
                  "eval/aime": [(0, 0.3)]})
    verdict = evaluate(policy(tmp_path, rule()), run)
    aime, gsm8k = verdict.results
    assert (aime.rule, aime.metric) == (f"tito[eval/aime/{TITO}]", f"eval/aime/{TITO}")
    assert (aime.status, aime.step, aime.value) == (Status.FAIL, 1, 0.5)
    assert (gsm8k.rule, gsm8k.status) == (f"tito[eval/gsm8k/{TITO}]", Status.PASS)
    same(live(policy(tmp_path, rule()), run), verdict)
    same(live(policy(tmp_path, rule()), run, saved=True), verdict)


def test_a_metric_appearing_late_is_judged_live_too(tmp_path):
    run = run_of({f"eval/a/{TITO}": [(0, 0.0), (1, 0.0), (2, 0.0)], f"eval/b/{TITO}": [(2, 0.25)]})
    policies = policy(tmp_path, rule())
    ev = Evaluation(policies)
    first = {n: s for n, s in run.series.items() if n.startswith("eval/a")}
    ev.feed(first, run)
    (only,) = ev.verdict(run, final=False).results
    assert only.rule == f"tito[eval/a/{TITO}]" and only.status is Status.PASS
    ev.feed({n: s for n, s in run.series.items() if n.startswith("eval/b")}, run)
    late = by_rule(ev.verdict(run, final=True))[f"tito[eval/b/{TITO}]"]
    assert (late.status, late.step) == (Status.FAIL, 2)


def test_no_metric_matching_is_an_error_naming_the_pattern_or_a_skip_if_logged(tmp_path):
    run = run_of({"eval/aime": [(0, 0.3)]})
    (error,) = evaluate(policy(tmp_path, rule()), run).results
    assert (error.rule, error.status) == ("tito", Status.ERROR)
    assert f"no metric of the run matches eval/*/{TITO}" in error.message
    (skip,) = evaluate(policy(tmp_path, rule(", if_logged: true")), run).results
    assert skip.status is Status.SKIP and "not logged by this run (if_logged)" in skip.message
    ev = Evaluation(policy(tmp_path, rule()))
    ev.feed(run.series, run)
    (waiting,) = ev.verdict(run, final=False).results
    assert waiting.status is Status.PENDING and f"eval/*/{TITO}" in waiting.message


def test_a_pattern_the_source_can_never_carry_is_not_captured(tmp_path):
    record = Capture("the CI record", frozenset({"train/grad_norm"}), "the full log")
    run = run_of({"train/grad_norm": [(0, 0.2)]}, capture=record)
    (r,) = evaluate(policy(tmp_path, rule()), run).results
    assert r.status is Status.SKIP and r.not_judged == "not captured by the CI record"
    holds = Capture("the CI record", frozenset({f"eval/x/{TITO}"}), "the full log")
    (r,) = evaluate(policy(tmp_path, rule()), run_of({"a": [(0, 1.0)]}, capture=holds)).results
    assert r.status is Status.ERROR  # the record could carry one: its absence is no skip


def test_a_nan_in_one_matching_metric_is_an_error_of_that_metric_only(tmp_path):
    run = run_of({f"eval/a/{TITO}": [(0, math.nan)], f"eval/b/{TITO}": [(0, 0.0)]})
    a, b = evaluate(policy(tmp_path, rule()), run).results
    assert (a.status, b.status) == (Status.ERROR, Status.PASS)


# ---- metric: config.KEY ----------------------------------------------------------------

FROM_CONFIG = (
    "  - {id: reach, metric: config.key, reduce: max, check: {min: config.threshold}}\n"
    "  - {id: finite, metric: config.key, check: {finite: true}}\n"
)


def test_the_metric_the_config_names_is_judged_and_named(tmp_path):
    run = run_of({"eval/aime": [(0, 0.1), (1, 0.15)], "eval/gsm8k": [(0, 0.9)]},
                 config={"key": "eval/aime", "threshold": 0.2})
    verdict = evaluate(policy(tmp_path, FROM_CONFIG), run)
    reach, finite = verdict.results
    assert (reach.rule, reach.metric, reach.status) == ("reach", "eval/aime", Status.FAIL)
    assert reach.value == pytest.approx(0.15) and finite.metric == "eval/aime"
    same(live(policy(tmp_path, FROM_CONFIG), run), verdict)
    same(live(policy(tmp_path, FROM_CONFIG), run, saved=True), verdict)


@pytest.mark.parametrize(("config", "words"), [
    ({"threshold": 0.2}, "run config does not set key, which rule p/reach reads for its "
                         "metric; give the run's value, e.g. --config key=..."),
    ({"key": None, "threshold": 0.2}, "--config key=..."),
    ({"key": 3, "threshold": 0.2}, "config key is 3; rule p/reach needs a metric name there"),
])
def test_a_config_that_names_no_metric_is_an_error_saying_which_flag(tmp_path, config, words):
    run = run_of({"eval/aime": [(0, 0.5)]}, config=config)
    reach, finite = evaluate(policy(tmp_path, FROM_CONFIG), run).results
    assert reach.status is Status.ERROR and words in reach.message
    assert finite.status is Status.ERROR


def test_points_fed_before_the_config_named_their_metric_are_never_half_judged(tmp_path):
    run = run_of({"eval/aime": [(0, 0.5)]}, config={"key": "eval/aime", "threshold": 0.2})
    ev = Evaluation(policy(tmp_path, FROM_CONFIG))
    ev.feed(run.series)  # no metadata yet
    reach, _ = ev.verdict(run, final=True).results
    assert reach.status is Status.ERROR and "after points of it" in reach.message
    assert ev.reread() is not None and "eval/aime" in ev.reread()


@pytest.mark.parametrize("bounded", [True, False])
def test_points_fed_before_a_restart_are_read_again_when_the_config_names_them_after(
    tmp_path, bounded
):
    """Issue 28: the metric names fed were not in the saved state, so after a restart a
    config naming one of them made its rule judge from the restart on (a NaN before it
    missed: `finite` passed). Now it is learned late, as without the restart: an error
    and a re-read, whose verdict is the whole run's."""
    policies = policy(tmp_path, FROM_CONFIG)
    early = run_of({"eval/aime": [(0, 0.5), (1, math.nan)]}, config={"threshold": 0.2})
    later = run_of({"eval/aime": [(2, 0.6)]}, config={"key": "eval/aime", "threshold": 0.2})
    verdicts = []
    for restart in (False, True):
        ev = Evaluation(policies, bounded=bounded)
        ev.feed(early.series, early)
        ev.verdict(early, final=False)
        if restart:
            ev = Evaluation.from_state(policies, json.loads(json.dumps(ev.to_state())))
        ev.feed(later.series, later)
        assert ev.reread() is not None and "eval/aime" in ev.reread()
        if restart:  # saved while learned late, it still is when restored
            ev = Evaluation.from_state(policies, json.loads(json.dumps(ev.to_state())))
            assert ev.reread() is not None and "eval/aime" in ev.reread()
        verdicts.append(ev.verdict(later, final=False))
    same(verdicts[1], verdicts[0])
    finite = by_rule(verdicts[1])["finite"]
    assert finite.status is Status.ERROR and "after points of it" in finite.message
    whole = run_of({"eval/aime": [(0, 0.5), (1, math.nan), (2, 0.6)]}, config=later.config)
    again = Evaluation(policies, bounded=bounded)  # the caller reads the run again
    again.feed(whole.series, whole)
    assert again.reread() is None
    verdict = again.verdict(whole, final=True)
    same(verdict, evaluate(policies, whole))
    assert (by_rule(verdict)["finite"].status, by_rule(verdict)["finite"].step) == (
        Status.ERROR, 1
    )


def test_a_state_saved_without_the_names_fed_takes_a_config_named_metric_as_late(tmp_path):
    """A state an earlier gatekeeper saved has no `tried`: which metrics were fed is
    unknown, so a config naming a metric after the restart re-reads the run (once; a
    re-read is never wrong), and the state saved again still says unknown."""
    policies = policy(tmp_path, FROM_CONFIG)
    early = run_of({"eval/aime": [(0, math.nan)]}, config={"threshold": 0.2})
    ev = Evaluation(policies, bounded=True)
    ev.feed(early.series, early)
    saved = json.loads(json.dumps(ev.to_state()))
    assert saved.pop("tried") == ["eval/aime"]  # the names fed: the run's metrics, no more
    ev = Evaluation.from_state(policies, saved)
    assert "tried" not in ev.to_state()
    named = run_of({"eval/b": [(1, 0.5)]}, config={"key": "eval/b", "threshold": 0.2})
    ev.feed(named.series, named)
    assert ev.reread() is not None and "eval/b" in ev.reread()
    with pytest.raises(StateDataError, match="evaluation.tried"):
        Evaluation.from_state(policies, {**saved, "tried": [3]})


def test_a_config_naming_another_metric_later_judges_that_one(tmp_path):
    policies = policy(tmp_path, FROM_CONFIG)
    ev = Evaluation(policies)
    first = run_of({}, config={"key": "eval/a", "threshold": 0.2})
    ev.feed({}, first)
    second = run_of({"eval/b": [(0, 0.1)]}, config={"key": "eval/b", "threshold": 0.2})
    ev.feed(second.series, second)
    reach, _ = ev.verdict(second, final=True).results
    assert (reach.metric, reach.status) == ("eval/b", Status.FAIL)


def test_a_bound_the_config_no_longer_sets_is_not_shown_as_the_bound(tmp_path):
    """Live, the run's config drops the key a bound was read from: the result (an error
    naming the key) is the one an evaluation that never saw the bound gives, as after a
    restart (it showed the old bound in `expected` and the plot's parameters)."""
    policies = policy(tmp_path, FROM_CONFIG)
    points = {"eval/a": [(0, 0.5)]}
    bound = run_of(points, config={"key": "eval/a", "threshold": 0.2})
    unset = run_of(points, config={"key": "eval/a"})
    ev, fresh = Evaluation(policies), Evaluation(policies)
    ev.feed(bound.series, bound)
    ev.verdict(bound, final=False)
    fresh.feed(unset.series, unset)
    (got, _), (want, _) = (e.verdict(unset, final=False).results for e in (ev, fresh))
    assert got.status is Status.ERROR and "does not set threshold" in got.message
    assert (got.expected, got.check) == (want.expected, want.check) == (
        "max: x >= config.threshold", {"kind": "min", "value": "config.threshold"}
    )


# ---- present_at ------------------------------------------------------------------------

PRESENT = ("  - {id: every, metric: config.key, "
           "check: {present_at: {steps_of: 'eval/*', unless: 'eval/skipped_*'}}}\n")
KEY = {"key": "eval/gsm8k"}


@pytest.mark.parametrize(("metrics", "status", "step"), [
    ({"eval/gsm8k": [(0, 0.8), (10, 0.7)], "eval/math": [(0, 0.1), (10, 0.2)]}, Status.PASS, None),
    ({"eval/gsm8k": [(0, 0.8)], "eval/math": [(10, 0.3)]}, Status.FAIL, 10),
    ({"eval/gsm8k": [(0, 0.8), (20, 0.6)], "eval/skipped_ckpt_missing": [(10, 1.0)]},
     Status.PASS, None),  # a round miles marks skipped is no round
    ({"eval/gsm8k": [(0, 0.8)], "eval/lag_steps": [(0, 1.0), (10, 1.0)]}, Status.FAIL, 10),
    ({"eval/gsm8k": [(0, math.nan)]}, Status.PASS, None),  # NaN is a point (finite judges it)
    ({"eval/math": [(0, 0.5)]}, Status.FAIL, 0),
])
def test_present_at_every_round_whole_live_and_saved(tmp_path, metrics, status, step):
    run = run_of(metrics, config=KEY)
    policies = policy(tmp_path, PRESENT)
    (r,) = evaluate(policies, run).results
    assert (r.status, r.metric) == (status, "eval/gsm8k")
    if status is Status.FAIL:
        assert r.step == step and r.value == 0
        assert r.message.startswith(f"no point, while eval/* has one at eval/step {step} (")
    same(live(policies, run), evaluate(policies, run))
    same(live(policies, run, saved=True), evaluate(policies, run))


def test_present_at_settles_a_round_only_when_a_later_one_came_or_the_run_ended(tmp_path):
    run = run_of({"eval/gsm8k": [(0, 0.8)], "eval/math": [(0, 0.1), (10, 0.2)]}, config=KEY)
    ev = Evaluation(policy(tmp_path, PRESENT))
    ev.feed(run.series, run)
    (r,) = ev.verdict(run, final=False).results
    assert r.status is not Status.FAIL  # round 10 may still get its eval/gsm8k point
    (r,) = ev.verdict(run, final=True).results
    assert (r.status, r.step) == (Status.FAIL, 10)


def test_present_at_only_counts_the_steps_of_its_axis(tmp_path):
    run = run_of({"eval/gsm8k": [(0, 0.8)]}, config=KEY)
    run.series["eval/other"] = Series.from_lists("eval/other", [5], [1.0], "train/step")
    (r,) = evaluate(policy(tmp_path, PRESENT), run).results
    assert r.status is Status.PASS


ROUNDS_OF_B = "  - {id: a-at-b, metric: a, check: {present_at: {steps_of: b, unless: c}}}\n"


@pytest.mark.parametrize(("first", "then", "status"), [
    # `a` on train/step through step 30, then rounds at eval/step 0..3: `a` has no point
    # at any of them (it counted as present: PASS live, FAIL in `check`)
    ({"a": (range(31), "train/step")}, {"b": (range(4), "eval/step")}, Status.FAIL),
    # `a` on the rounds' axis through step 4, then rounds at 4 and 6: present at both
    ({"a": (range(5), "eval/step")}, {"b": ([4, 6], "eval/step"), "a": ([6], "eval/step")},
     Status.PASS),
    # a skip mark before the first round: that step is no round (it was dropped)
    ({"c": ([2], "eval/step")}, {"b": ([2, 4], "eval/step"), "a": ([4], "eval/step")},
     Status.PASS),
    # a skip mark on another axis skips nothing
    ({"c": ([2], "train/step")}, {"b": ([2, 4], "eval/step"), "a": ([4], "eval/step")},
     Status.FAIL),
])
def test_present_at_points_before_its_axis_is_known_are_judged_as_check_does(
    tmp_path, first, then, status
):
    """Points fed before the first `steps_of` point (another axis counts its own steps:
    train/step 30 comes before eval/step 0) are kept by their axis until the rounds' axis
    is known, then judged as `check`, which knows it from the start, judges them. Rows
    arrive whole (what `present_at` relies on live), so only the steps from their axis'
    last one on are kept. Also with the state saved as JSON in between (the daemon)."""
    def part(spec):
        return {m: Series.from_lists(m, list(steps), [1.0] * len(steps), axis)
                for m, (steps, axis) in spec.items()}

    policies = policy(tmp_path, ROUNDS_OF_B)
    whole = {m: (list(steps) + list(then.get(m, ((), ""))[0]), axis)
             for m, (steps, axis) in first.items()}
    run = Run(name="r", source="mem", series={**part(then), **part(whole)})
    (want,) = evaluate(policies, run).results
    assert want.status is status
    for saved in (False, True):
        ev = Evaluation(policies, bounded=saved)
        ev.feed(part(first), run)
        if saved:
            ev = Evaluation.from_state(policies, json.loads(json.dumps(ev.to_state())))
        ev.feed(part(then), run)
        same(ev.verdict(run, final=True), evaluate(policies, run))


@pytest.mark.parametrize(("check", "words"), [
    ("{present_at: 'eval/*'}\n    reduce: max", "present_at judges whether a metric has a point"),
    ("{present_at: {steps_of: []}}", "steps_of names at least one metric pattern"),
    ("{present_at: {steps_of: 3}}", "give a metric name pattern or a list of them"),
])
def test_present_at_errors_name_the_line(tmp_path, check, words):
    with pytest.raises(PolicyError) as err:
        policy(tmp_path, f"  - id: r\n    metric: m\n    check: {check}\n")
    assert words in str(err.value) and "p.yaml:" in str(err.value)


@pytest.mark.parametrize("metric", ["'eval/*'", "config.key"])
def test_a_history_rule_names_one_fixed_metric(tmp_path, metric):
    with pytest.raises(PolicyError) as err:
        band = "{history: {rel_up: 0.2, rel_down: 0.2}}"
        policy(tmp_path, f"  - {{id: r, metric: {metric}, check: {band}}}\n")
    assert "a history rule keeps its baselines under one fixed metric name" in str(err.value)
    assert "p.yaml:4: rules[0].metric" in str(err.value)


def test_present_at_shorthand_is_its_steps_of(tmp_path):
    (p,) = policy(tmp_path, "  - {id: r, metric: eval/x, check: {present_at: 'eval/*'}}\n")
    assert p.rules[0].check.steps_of == ("eval/*",) and p.rules[0].check.unless == ()


# ---- through the CLI: reports carry the made rules -------------------------------------

CLI_POLICY = """
version: 1
name: evals
rules:
  - {id: x-zero, metric: "eval/*/x", check: {abs_max: 0}}
  - {id: key-every-eval, metric: config.key, check: {present_at: "eval/*"}}
"""


def test_check_reports_each_made_rule_in_json_and_junit(tmp_path):
    """`gatekeeper check` in a child process on a JSONL run: the JSON and the JUnit (valid
    against the schema CI readers use) name `RULE[METRIC]` and the config-named metric."""
    import xml.etree.ElementTree as ET

    import xmlschema

    from tests.helpers import REPO, gatekeeper, write_policy, write_rows

    run = write_rows(tmp_path / "run.jsonl", [
        {"step": 0, "eval/a": 0.5, "eval/b": 0.4, "eval/a/x": 0.0, "eval/b/x": 0.0},
        {"step": 1, "eval/b": 0.4, "eval/b/x": 0.25},
    ])
    pol = write_policy(tmp_path / "evals.yaml", CLI_POLICY)
    out = gatekeeper("check", str(run), "-p", str(pol), "--config", "key=eval/a",
                     "--json", str(tmp_path / "v.json"), "--junit", str(tmp_path / "v.xml"))
    assert out.returncode == 1, out.stdout + out.stderr
    results = {r["rule"]: r for r in json.loads((tmp_path / "v.json").read_text())["results"]}
    assert set(results) == {"x-zero[eval/a/x]", "x-zero[eval/b/x]", "key-every-eval"}
    assert results["x-zero[eval/a/x]"]["status"] == "pass"
    bad = results["x-zero[eval/b/x]"]
    assert (bad["status"], bad["step"], bad["metric"]) == ("fail", 1, "eval/b/x")
    every = results["key-every-eval"]
    assert (every["status"], every["step"], every["metric"]) == ("fail", 1, "eval/a")
    xmlschema.XMLSchema(str(REPO / "tests" / "data" / "junit-4.xsd")).validate(
        str(tmp_path / "v.xml")
    )
    names = {c.get("name") for c in ET.parse(tmp_path / "v.xml").getroot().iter("testcase")}
    assert any("x-zero[eval/b/x]" in n for n in names), names
