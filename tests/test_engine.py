"""The engine's semantics: magnitude, missing data, NaN, selections, modes, live vs final."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gatekeeper.engine import Evaluation, evaluate
from gatekeeper.model import Run, Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.verdict import GateStatus, Status
from tests.helpers import write_policy


def policy(tmp_path, rules: str, head: str = "", name: str = "p"):
    text = f"version: 1\nname: {name}\n{head}rules:\n{rules}"
    return load_policies([str(write_policy(tmp_path / f"{name}.yaml", text))])


def run_of(metrics: dict[str, list[tuple[int, float]]], **meta) -> Run:
    series = {
        m: Series.from_lists(m, [s for s, _ in pts], [v for _, v in pts], "train/step")
        for m, pts in metrics.items()
    }
    return Run(name=meta.pop("name", "r"), source="mem", series=series, **meta)


def one(verdict):
    (result,) = verdict.results
    return result


KL = "  - {id: kl, metric: train/ppo_kl, steps: [0], check: {abs_max: 1.0e-9}}\n"
KL_PASSING = "  - {id: kl-finite, metric: train/ppo_kl, check: {finite: true}}\n"


def test_signed_check_bug_is_caught_by_magnitude(tmp_path):
    run = run_of({"train/ppo_kl": [(0, -0.3), (1, 0.01)]})
    signed = policy(tmp_path, "  - {id: kl, metric: train/ppo_kl, steps: [0], check: {max: 1.0e-8}}\n", name="old")
    assert one(evaluate(signed, run)).status is Status.PASS  # what miles' assert did
    r = one(evaluate(policy(tmp_path, KL), run))
    assert r.status is Status.FAIL and r.step == 0 and r.value == -0.3
    assert "|x| = 0.3 > 1e-09 at train/step 0" in r.message
    assert r.expected == "|x| <= 1e-09" and r.source.endswith("p.yaml:4")


def test_nan_at_a_judged_step_is_an_error_never_a_pass(tmp_path):
    run = run_of({"train/ppo_kl": [(0, 0.0), (1, math.nan), (2, 0.0)]})
    rules = "  - {id: kl, metric: train/ppo_kl, check: {abs_max: 1.0}}\n"
    v = evaluate(policy(tmp_path, rules), run)
    assert one(v).status is Status.ERROR and one(v).step == 1 and "non-finite value NaN" in one(v).message
    assert v.status is GateStatus.ERROR and v.exit_code == 1
    live = Evaluation(policy(tmp_path, rules))
    live.feed(run.series)
    assert one(live.verdict(run, final=False)).status is Status.ERROR  # at once, even live


@pytest.mark.parametrize("steps", ["all", "{from: 0, to: 50}", "[0, 1, 40]", "{every: 1}"])
def test_nan_inside_a_reduction_is_an_error_at_once_live(tmp_path, steps):
    """A NaN inside a reduced selection makes it an ERROR whatever comes later (DESIGN: a
    NaN is ERROR at once); live it was PENDING until the selection was complete. The live
    result says what the final one says, word for word."""
    rules = f"  - {{id: m, metric: m, steps: {steps}, reduce: mean, check: {{max: 1}}}}\n"
    pol = policy(tmp_path, rules)
    first = run_of({"m": [(0, 0.5), (1, math.nan)]})
    live = Evaluation(pol)
    live.feed(first.series)
    now = one(live.verdict(first, final=False))
    assert now.status is Status.ERROR and now.step == 1
    assert now.message.startswith("non-finite value NaN at train/step 1 inside the mean")
    whole = run_of({"m": [(0, 0.5), (1, math.nan), (40, 0.2)]})
    live.feed(run_of({"m": [(40, 0.2)]}).series)
    final = one(live.verdict(whole, final=True))
    assert (final.status, final.message) == (now.status, now.message)
    assert one(evaluate(pol, whole)).message == now.message
    # a `last: n` selection is not: the NaN may leave its window
    tail = Evaluation(policy(tmp_path, rules.replace(steps, "{last: 1}"), name="t"))
    tail.feed(first.series)
    assert one(tail.verdict(first, final=False)).status is Status.PENDING


@pytest.mark.parametrize("if_logged", ["", ", if_logged: true"])
def test_a_metric_with_no_points_is_said_to_have_none(tmp_path, if_logged):
    """A metric the source names but holds no points of (a record's empty `series`) is an
    ERROR in those words, also under if_logged (it is logged, with nothing in it); it
    used to read "not in the run; similar: m", naming itself."""
    rules = f"  - {{id: r, metric: m, check: {{max: 1}}{if_logged}}}\n"
    r = one(evaluate(policy(tmp_path, rules), run_of({"m": []})))
    assert r.status is Status.ERROR and r.message == "metric m is in the run but has no points"


def test_missing_metric_and_missing_step(tmp_path):
    run = run_of({"train/ppo_kl": [(1, 0.0)], "train/other": [(0, 1.0)]})
    v = evaluate(policy(tmp_path, KL + "  - {id: gone, metric: train/ppo_k1, check: {max: 1}}\n"), run)
    kl, gone = v.results
    assert kl.status is Status.ERROR and "required train/step 0 missing (train/step has 1..1)" in kl.message
    assert gone.status is Status.ERROR and "not in the run; similar: train/ppo_kl" in gone.message
    live = Evaluation(policy(tmp_path, KL))
    live.feed(run.series)
    assert one(live.verdict(run, final=False)).status is Status.PENDING


def test_warn_severity_and_shadow_mode_never_fail_the_gate(tmp_path):
    run = run_of({"train/ppo_kl": [(0, 5.0)]})
    warn = policy(tmp_path, KL.replace("}}\n", "}, severity: warn}\n"))
    assert one(evaluate(warn, run)).status is Status.WARN
    # alone, a warn rule is no gating rule: the gate judged nothing (not a pass, not a fail)
    assert evaluate(warn, run).status is GateStatus.NOTHING and not evaluate(warn, run).failing()
    gating = policy(tmp_path, KL.replace("}}\n", "}, severity: warn}\n") + KL_PASSING)
    assert evaluate(gating, run).status is GateStatus.PASS
    shadow = policy(tmp_path, KL, head="mode: shadow\n")
    v = evaluate(shadow, run)
    assert one(v).status is Status.FAIL and not one(v).gating and v.exit_code == 5
    both = evaluate([*shadow, *policy(tmp_path, KL_PASSING, name="q")], run)
    assert both.status is GateStatus.PASS and both.exit_code == 0


def test_when_and_match(tmp_path):
    rules = (
        "  - {id: lora, metric: train/ppo_kl, steps: [0], check: {abs_max: 1.0e-8},"
        " when: {config.lora_rank: {gt: 0}}}\n"
        "  - {id: plain, metric: train/ppo_kl, steps: [0], check: {abs_max: 1.0e-9},"
        " when: {config.lora_rank: {truthy: false}}}\n"
    )
    data = {"train/ppo_kl": [(0, 5e-9)]}
    lora = evaluate(policy(tmp_path, rules), run_of(data, config={"lora_rank": 8}))
    assert [r.status for r in lora.results] == [Status.PASS, Status.SKIP]
    assert "needs config.lora_rank falsy" not in lora.results[1].message
    plain = evaluate(policy(tmp_path, rules), run_of(data))  # lora_rank not set at all
    assert [r.status for r in plain.results] == [Status.SKIP, Status.FAIL]
    assert "run does not set it" in plain.results[0].message

    head = "match: {tags: [e2e], name: 'qwen3-*', config: {backend: megatron}}\n"
    matched = policy(tmp_path, KL, head=head, name="m")
    ok = run_of(data, name="qwen3-4b", tags=("e2e",), config={"backend": "megatron"})
    assert one(evaluate(matched, ok)).status is Status.FAIL
    for other in (
        run_of(data, name="qwen3-4b", tags=("nightly",), config={"backend": "megatron"}),
        run_of(data, name="llama", tags=("e2e",), config={"backend": "megatron"}),
        run_of(data, name="qwen3-4b", tags=("e2e",), config={"backend": "fsdp"}),
    ):
        assert one(evaluate(matched, other)).status is Status.SKIP


def test_a_live_verdict_follows_the_runs_metadata_as_it_changes(tmp_path):
    """What the run's metadata decides (match, when, requires_config) is worked out once
    per change of it, not per poll: each verdict must still follow the metadata it is
    given, whether a new Run, the same Run edited in place, or a value that equals the
    old one but is another type (`1` and `true` are told apart by `eq`)."""
    rules = (
        "  - {id: small-lr, metric: m, check: {max: 0.5}, when: {config.lr: {lt: 1}}}\n"
        "  - {id: one, metric: m, check: {max: 0.5}, when: {config.flag: {eq: 1}}}\n"
    )
    head = "match: {tags: [rl]}\n"
    pols = policy(tmp_path, rules, head=head)
    ev = Evaluation(pols)
    ev.feed(run_of({"m": [(0, 0.9)]}).series)

    def statuses(run):
        return [r.status for r in ev.verdict(run, final=False).results]

    run = run_of({}, tags=("rl",), config={"lr": 2, "flag": 1})
    assert statuses(run) == [Status.SKIP, Status.FAIL]
    run.config["lr"] = 0.5  # edited in place
    assert statuses(run) == [Status.FAIL, Status.FAIL]
    run.config["flag"] = True  # == 1, yet not `eq: 1`
    assert statuses(run) == [Status.FAIL, Status.SKIP]
    run.tags = ()
    assert statuses(run) == [Status.SKIP, Status.SKIP]
    assert statuses(run_of({}, tags=("rl",), config={"lr": 0.5, "flag": 1})) == [
        Status.FAIL,
        Status.FAIL,
    ]
    for state in ev.to_state()["rules"]:  # judged whatever was skipped on the way
        assert state["tracker"]["judgement"]["judged"] == 1


def test_debounce_fires_on_the_nth_consecutive_violation(tmp_path):
    rules = "  - {id: g, metric: train/grad_norm, check: {max: 1.0}, for: 3}\n"
    two = run_of({"train/grad_norm": [(0, 5), (1, 5), (2, 0.1), (3, 5), (4, 5)]})
    assert one(evaluate(policy(tmp_path, rules), two)).status is Status.PASS
    three = run_of({"train/grad_norm": [(0, 5), (1, 5), (2, 0.1), (3, 5), (4, 5), (5, 5), (6, 5)]})
    r = one(evaluate(policy(tmp_path, rules), three))
    assert r.status is Status.FAIL and r.step == 5 and "for 3 consecutive points" in r.message


def test_debounce_carries_across_chunks(tmp_path):
    ev = Evaluation(policy(tmp_path, "  - {id: g, metric: m, check: {max: 1.0}, for: 3}\n"))
    for step in range(3):
        ev.feed({"m": Series.from_lists("m", [step], [9.0])})
    assert one(ev.verdict(run_of({}), final=False)).status is Status.FAIL


@pytest.mark.parametrize(
    "steps, reduce, check, status, value",
    [
        ("first", "none", "{max: 0.5}", Status.PASS, 0.1),
        ("last", "none", "{max: 0.5}", Status.FAIL, 0.9),
        ("{last: 3}", "mean", "{between: [0.6, 0.8]}", Status.PASS, 0.7),
        ("{from: 1, to: 3}", "max", "{max: 0.55}", Status.FAIL, 0.6),
        ("{from: 1, to: 3}", "median", "{approx: {value: 0.4, abs: 0.001}}", Status.PASS, 0.4),
        ("[0, 2]", "min", "{min: 0.1}", Status.PASS, 0.1),
        ("all", "last", "{max: 0.95}", Status.PASS, 0.9),
    ],
)
def test_selections_and_reductions(tmp_path, steps, reduce, check, status, value):
    run = run_of({"m": list(enumerate([0.1, 0.2, 0.4, 0.6, 0.6, 0.6, 0.9]))})
    rules = f"  - {{id: r, metric: m, steps: {steps}, reduce: {reduce}, check: {check}}}\n"
    r = one(evaluate(policy(tmp_path, rules), run))
    assert r.status is status, r.message
    assert r.value == pytest.approx(value)


def test_range_without_points_is_an_error(tmp_path):
    rules = "  - {id: r, metric: m, steps: {from: 50, to: 60}, check: {max: 1}}\n"
    r = one(evaluate(policy(tmp_path, rules), run_of({"m": [(0, 0.1), (10, 0.1)]})))
    assert r.status is Status.ERROR and "no points in steps 50..60" in r.message


def test_reach(tmp_path):
    rules = "  - {id: r, metric: m, check: {reach: {value: 0.75, by_step: 80, window: 5}}}\n"
    rising = [(s, 0.5 + 0.4 * s / 40 if s < 40 else 0.9) for s in range(100)]
    r = one(evaluate(policy(tmp_path, rules), run_of({"m": rising})))
    assert r.status is Status.PASS and r.step is not None and r.step <= 80
    flat = [(s, 0.6) for s in range(100)]
    r = one(evaluate(policy(tmp_path, rules), run_of({"m": flat})))
    assert r.status is Status.FAIL and "never reached 0.75 by step 80 (best 0.6" in r.message
    # Live: before step 80 it cannot tell yet; once past it, it fails without waiting.
    ev = Evaluation(policy(tmp_path, rules))
    ev.feed(run_of({"m": flat[:50]}).series)
    assert one(ev.verdict(run_of({}), final=False)).status is Status.PENDING
    ev.feed(run_of({"m": flat[50:]}).series)
    assert one(ev.verdict(run_of({}), final=False)).status is Status.FAIL


def test_override_off_is_skip_with_reason(tmp_path):
    from gatekeeper.policy.overrides import apply_cli_overrides, parse_override

    policies = apply_cli_overrides(policy(tmp_path, KL), [parse_override("p/kl=off:MLA kernels differ")])
    r = one(evaluate(policies, run_of({"train/ppo_kl": [(0, -0.3)]})))
    assert r.status is Status.SKIP and r.override == "MLA kernels differ"
    assert "switched off by override: MLA kernels differ" in r.message


def test_chunked_feeding_matches_one_shot(tmp_path):
    rules = (
        "  - {id: a, metric: m, check: {abs_max: 2.5}, for: 2}\n"
        "  - {id: b, metric: m, check: {reach: {value: 2, by_step: 900, window: 7}}}\n"
        "  - {id: c, metric: m, steps: {from: 100, to: 400}, reduce: mean, check: {between: [-1, 1]}}\n"
        "  - {id: d, metric: m, steps: {last: 10}, check: {max: 3}}\n"
    )
    rng = np.random.default_rng(1)
    values = rng.normal(0, 1, 1000)
    run = Run(name="r", source="mem", series={"m": Series("m", np.arange(1000), values)})
    whole = evaluate(policy(tmp_path, rules), run)
    ev = Evaluation(policy(tmp_path, rules))
    for lo in range(0, 1000, 37):
        ev.feed({"m": Series("m", np.arange(lo, min(lo + 37, 1000)), values[lo : lo + 37])})
    chunked = ev.verdict(run, final=True)
    for a, b in zip(whole.results, chunked.results, strict=True):
        da, db = a.to_dict(), b.to_dict()
        assert da.pop("value") == pytest.approx(db.pop("value"), rel=1e-12)  # rolling-sum rounding
        assert da == db


def test_results_and_contexts_made_without_setattr_equal_the_constructors(tmp_path):
    """RuleResult.of and the engine's _context skip the frozen dataclass __init__ (a
    live verdict makes them per rule per poll); they must give every field and equal
    what the constructor makes, and a field added to either class must be given too."""
    import dataclasses
    import pickle

    from gatekeeper.checks import EvalContext
    from gatekeeper.engine import _context
    from gatekeeper.verdict import RuleResult

    pols = policy(
        tmp_path,
        "  - {id: a, metric: m, check: {max: 1}, for: 2}\n"
        "  - {id: b, metric: m, check: {spike: {window: 3, factor: 5}}}\n"
        "  - {id: c, metric: m, check: {fraction: {above: 0.5, max: 0.5}}}\n"
        "  - {id: d, metric: gone, check: {max: 1}}\n",
    )
    run = run_of({"m": [(s, 0.1 if s != 5 else 9.0) for s in range(12)]})
    results = evaluate(pols, run).results
    assert results
    names = [f.name for f in dataclasses.fields(RuleResult)]
    for r in results:
        assert list(vars(r)) == names  # every field, in declaration order
        made = RuleResult(**vars(r))
        assert made == r and repr(made) == repr(r)
        assert made.to_dict() == r.to_dict() and pickle.loads(pickle.dumps(r)) == r
    values = dict(run=run, history=None, rule_key="p/a", now=1.0, last_arrival=None,
                  metric="m", references=None)
    ctx = _context(**values)
    assert set(vars(ctx)) == {f.name for f in dataclasses.fields(EvalContext)}
    assert ctx == EvalContext(**values) and repr(ctx) == repr(EvalContext(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.now = 2.0  # type: ignore[misc]


def test_tracker_state_equals_the_generic_encoding(tmp_path):
    """RuleTracker.to_state passes plain ints/strs/bools/None through as they are; each
    stage's data must be what statedata.encode makes of its dataclass (types included)."""
    import orjson

    from gatekeeper.statedata import encode

    pols = policy(
        tmp_path,
        "  - {id: a, metric: m, check: {max: 1}, for: 2}\n"
        "  - {id: b, metric: m, steps: [1, 3, 99], check: {abs_max: 5}}\n"
        "  - {id: c, metric: m, steps: {last: 3}, check: {max: 1}}\n"
        "  - {id: d, metric: m, steps: {from: 2, to: 6}, reduce: mean, check: {max: 1}}\n"
        "  - {id: e, metric: m, check: {fraction: {above: 0.5, max: 0.5}}}\n"
        "  - {id: f, metric: gone, check: {max: 1}}\n",
    )
    ev = Evaluation(pols)
    ev.feed(run_of({"m": [(s, [0.1, 9.0, math.nan][s % 3]) for s in range(10)]}).series)
    for t in ev.trackers:
        state = t.to_state()
        judged = encode(t.judgement)
        del judged["agg"]  # saved by its check, as "aggregate"
        generic = {
            "selection": encode(t.selection),
            "reduction": encode(t.reduction),
            "judgement": judged,
            "aggregate": state["aggregate"],
        }
        assert orjson.dumps(state) == orjson.dumps(generic)
        for stage in ("selection", "reduction", "judgement"):
            if state[stage] is not None:
                got, want = state[stage].values(), generic[stage].values()  # type: ignore[union-attr]
                assert [type(v) for v in got] == [type(v) for v in want]


def test_a_tracker_has_slots_not_a_dict(tmp_path):
    """The daemon keeps a tracker per rule per run: with a per-instance dict each grew by
    ~1.3 KB once it passed CPython's 29 compactly stored attributes (+20 MB at 1,000 runs
    of 16 rules). Slots keep it and its stages' states small whatever fields are added."""
    from gatekeeper.engine import RuleTracker

    (rule,) = policy(tmp_path, "  - {id: a, metric: m, check: {max: 1}}\n")[0].rules
    tracker = RuleTracker(rule)
    tracker.outcome(final=False, ctx=None)  # type: ignore[arg-type]
    assert not hasattr(tracker, "__dict__")
    assert not hasattr(tracker.selection, "__dict__")
    assert not hasattr(tracker.judgement, "__dict__")
    RuleTracker(rule).restore(tracker.to_state(), "test")


def test_points_waiting_for_a_config_period_are_one_chunk_and_judged_alike(tmp_path):
    """`steps: {every: config.k}` keeps the points fed before the run's config brings
    the period; they wait as one chunk (the daemon saves them every poll), and are judged
    exactly as the whole run is once the period is known."""
    pols = policy(
        tmp_path,
        "  - {id: e, metric: m, steps: {every: config.rollout}, check: {max: 0.5}, for: 2}\n",
    )
    points = [(s, 0.9 if s in (6, 9, 12) else 0.1) for s in range(20)]
    whole = evaluate(pols, run_of({"m": points}, config={"rollout": 3}))
    live = Evaluation(pols)
    for lo in range(0, 20, 4):  # five polls before the config is known
        live.feed(run_of({"m": points[lo : lo + 4]}).series)
    (tracker,) = live.trackers
    unbound = tracker.selection.unbound
    assert len(unbound) == 1 and unbound[0][0].tolist() == list(range(20))
    got = live.verdict(run_of({"m": points}, config={"rollout": 3}), final=True)
    assert [r.to_dict() for r in got.results] == [r.to_dict() for r in whole.results]
    assert one(got).status is Status.FAIL


@pytest.mark.parametrize(
    ("reduce", "values", "check", "status", "value"),
    [
        # np.mean's pairwise float sum: Inf + -Inf = NaN for a mean of 0, and NaN is inside
        # no `between` (both comparisons false): a silent pass
        ("mean", [1e308, -1e308, *[0.0] * 6] * 2, "{between: [1, 2]}", Status.FAIL, 0.0),
        ("mean", [1e308, -1e308, *[0.0] * 6] * 2, "{approx: {value: 0, abs: 1}}", Status.PASS, 0.0),
        # a mean of finite points summed to -Inf although it is +3.3e299: passed lt: -1e300
        (
            "mean",
            [-1e308, -1e308, 1e308, 1e308, 1e308, 2e300 * 10 - 1e308],
            "{lt: -1.0e+300}",
            Status.FAIL,
            None,
        ),
        ("mean", [1.7e308, 1.7e308], "{max: 1.7e308}", Status.PASS, 1.7e308),
        ("median", [1.7e308, 1.7e308], "{max: 1.7e308}", Status.PASS, 1.7e308),
        ("median", [-1.7e308, -1.7e308, -1.7e308, 1.0], "{min: -1.7e308}", Status.PASS, -1.7e308),
    ],
)
def test_a_reduction_of_finite_points_never_overflows(
    tmp_path, reduce, values, check, status, value
):
    """Found by tests/fuzz/test_verdict_oracle.py: a mean or median of finite points came
    out NaN or Inf when a float sum overflowed (the mean of finite points is finite)."""
    rules = f"  - {{id: m, metric: m, reduce: {reduce}, check: {check}}}\n"
    run = run_of({"m": list(enumerate(values))})
    r = one(evaluate(policy(tmp_path, rules), run))
    assert r.status is status, r.message
    assert math.isfinite(r.value)
    if value is not None:
        assert r.value == value


@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("zeros", [[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0]])
def test_a_min_or_max_of_zeros_is_the_same_zero_polled_and_whole(tmp_path, reduce, zeros):
    """Found by tests/fuzz/test_verdict_oracle.py on new seeds: np.min of one chunk and
    min() across chunks each keep the zero they met first, so a min of -0.0 and 0.0 was
    -0 polled point by point and 0 whole. Either way it is +0.0 now."""
    rules = f"  - {{id: m, metric: m, reduce: {reduce}, check: {{abs_max: 1}}}}\n"
    policies = policy(tmp_path, rules)
    run = run_of({"m": list(enumerate(zeros))})
    ev = Evaluation(policies)
    for step, value in enumerate(zeros):
        ev.feed({"m": Series.from_lists("m", [step], [value], "train/step")})
    for r in (one(evaluate(policies, run)), one(ev.verdict(run, final=True))):
        assert r.status is Status.PASS and math.copysign(1.0, r.value) == 1.0, r.message


@pytest.mark.parametrize(
    ("x", "status"),
    [(-1.7e308, Status.FAIL), (-1e308, Status.FAIL), (-0.8e308, Status.PASS), (1.0, Status.PASS)],
)
def test_approx_compares_an_overflowed_distance_with_an_overflowed_bound(tmp_path, x, status):
    """Found by tests/fuzz/test_verdict_oracle.py: |x - v| and rel*|v| both overflowed to
    Inf and Inf > Inf is false, so |x - 1.7e308| = 3.4e308 passed a tolerance of 2.55e308."""
    rules = "  - {id: a, metric: m, check: {approx: {value: 1.7e308, rel: 1.5}}}\n"
    r = one(evaluate(policy(tmp_path, rules), run_of({"m": [(0, x)]})))
    assert r.status is status, r.message
