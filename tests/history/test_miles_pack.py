"""policies/miles/history.yaml against miles' own gate, on records captured and merged as
miles' CI writes them, through the real CLI.

The reference is tests/history/miles_ref.py, mirrored from radixark/miles at
31f1ca961a94cb860cec3b2dea34ec332bfa8f76 (CiHistoryBackend capture, ci_utils merge, the
SQLite store schema and baseline query, the gate's selection/constraint/mean, its scope:
only the test file's register_ci_gate specs, a declared metric missing from the record an
ERROR; run_gate_hook never failing CI: shadow).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.history import open_store
from tests.helpers import REPO, gatekeeper
from tests.history import miles_ref

PACK = str(REPO / "policies" / "miles" / "history.yaml")
TEST_PATH = "tests/e2e/megatron/test_qwen3_grpo_ci.py"
SUITE = "stage-c-8-gpu-h100"
IDENTITY = (TEST_PATH, "cuda", SUITE)
RULE_OF = {
    "train/grad_norm": "grad-norm",
    "train/ppo_kl": "ppo-kl",
    "train/train_rollout_logprob_abs_diff": "train-rollout-logprob-abs-diff",
    "train/train_rollout_kl": "train-rollout-kl",
    "rollout/raw_reward": "raw-reward",
    "rollout/tito_session_mismatch_rate/v1/assistant_text": "tito-mismatch-v1",
    "rollout/tito_session_mismatch_rate/v2/assistant_text": "tito-mismatch-v2",
}


# the documented CI command needs no flag for shadow: the pack's allow_nothing_judged
# counts because every policy loaded is shadow (docs/policy.md "Nothing judged")
SHADOW: tuple[str, ...] = ()


def write_checkout(root: Path, declared: list[str] | tuple[str, ...] = tuple(RULE_OF)) -> Path:
    """A miles checkout holding the test file the records belong to, declaring `declared`
    with register_ci_gate(metric_key=...) (GATE_DEFAULTS fill steps and constraint)."""
    test = root / "miles" / TEST_PATH
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text(
        "from tests.ci.ci_register import register_cuda_ci\n"
        "from tests.ci.metric_history.register import register_ci_gate\n"
        f'register_cuda_ci(est_time=300, suite="{SUITE}", labels=["megatron"])\n'
        + "".join(f'register_ci_gate(metric_key="{m}")\n' for m in declared)
    )
    return root / "miles"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return write_checkout(tmp_path)


def enforce_pack(tmp_path: Path) -> str:
    """The shipped pack with its one documented switch flipped: `mode: enforce`."""
    text = Path(PACK).read_text()
    assert text.count("\nmode: shadow\n") == 1
    out = tmp_path / "history-enforce.yaml"
    out.write_text(text.replace("\nmode: shadow\n", "\nmode: enforce\n"))
    return str(out)


def capture_run(
    base: Path, seed: int, *, grad_scale: float = 1.0, dup_step: bool = False,
    nan_kl_at: int | None = None, drop: tuple[str, ...] = (),
) -> str:
    """Two processes log as miles' trainer does: the actor the train/* keys on train steps,
    the rollout manager the rollout/* keys; the harness merges the attempt's files."""
    rng = np.random.default_rng(seed)
    attempt = miles_ref.attempt_record_dir(str(base), TEST_PATH, 1)
    train, rollout = [], []
    for step in range(6):
        j = lambda: float(1 + 0.03 * rng.standard_normal())  # noqa: E731 - run-to-run jitter
        train.append(
            (
                step,
                {
                    "train/grad_norm": 0.12 * (1 + 0.2 * step) * j() * grad_scale,
                    "train/ppo_kl": 0.03 * j(),
                    "train/train_rollout_logprob_abs_diff": 0.05 * j(),
                    "train/train_rollout_kl": 0.04 * j(),
                },
            )
        )
        rollout.append(
            (
                step,
                {
                    "rollout/raw_reward": 0.4 + 0.05 * step * j(),
                    "rollout/tito_session_mismatch_rate/v1/assistant_text": 0.01 * j(),
                    "rollout/tito_session_mismatch_rate/v2/assistant_text": 0.02 * j(),
                },
            )
        )
    for _, logged in train + rollout:
        for metric in drop:
            logged.pop(metric, None)
    if nan_kl_at is not None:
        train[nan_kl_at][1]["train/ppo_kl"] = float("nan")  # captured as the "NaN" marker
    miles_ref.capture(attempt, train)
    miles_ref.capture(attempt, rollout)
    if dup_step:  # a third process logs grad_norm at a step the actor logged too
        miles_ref.capture(attempt, [(2, {"train/grad_norm": 0.2})])
    merged = f"{attempt}.merged.jsonl"
    miles_ref.merge_attempt_records(attempt, merged)
    return merged


def rule_status(per_coordinate: dict) -> str:
    """miles' per-coordinate statuses as one gatekeeper rule status."""
    s = set(per_coordinate.values())
    for worst in ("error", "fail", "pass"):
        if worst in s:
            return worst
    return "skip"  # every coordinate inactive: cold start


def gate_code(per_metric: dict) -> int:
    """The exit code miles' statuses mean for the pack switched to enforce: 1 a rule
    failed or errored (miles: NOT-TRUSTED), else 0 (a cold start is trusted: the pack's
    allow_nothing_judged). Shipped in shadow it is 0 always, as miles' hook never fails CI."""
    statuses = {rule_status(s) for s in per_metric.values()}
    return 1 if statuses & {"fail", "error"} else 0


def gk_check(checkout: Path, record: str, url: str, run_id: str, out: Path):
    """The shipped (shadow) pack as a miles CI job runs it: exit 0 whatever it finds."""
    res = gatekeeper(
        "check", record, "-p", PACK, "--history", url, "--record", "--run-id", run_id,
        *SHADOW, "--json", str(out), cwd=checkout,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res, json.loads(out.read_text())


def enforced(checkout: Path, tmp_path: Path, record: str, url: str) -> int:
    """The exit code of the same judgement with the pack switched to enforce (no record)."""
    res = gatekeeper("check", record, "-p", enforce_pack(tmp_path), "--history", url,
                     cwd=checkout)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode


def statuses(verdict: dict) -> dict[str, str]:
    return {r["rule"]: r["status"] for r in verdict["results"]}


def both_gates(checkout, tmp_path, miles, url, i, declared=None, **kw):
    """Judge one captured run with miles' gate and with the pack; record it in both."""
    record = capture_run(tmp_path / f"records{i}", seed=i, **kw)
    mv = miles_ref.evaluate(miles, IDENTITY, record, declared=declared)
    miles.write_run(
        IDENTITY, f"c{i}", f"2026-01-{i:02d}T00:00:00.000000+00:00", miles_ref.trusted(mv),
        miles_ref.values_to_write(record, mv),
    )
    res, verdict = gk_check(checkout, record, url, f"r{i}", tmp_path / f"v{i}.json")
    return mv, res, verdict


def test_pack_keys_are_miles_keys():
    from gatekeeper.baselines import coordinate_prefix, history_rules
    from gatekeeper.policy.loader import load_policies

    got = {r.metric: coordinate_prefix(r) for r in history_rules(load_policies([PACK]))}
    want = {
        m: (m, miles_ref.canonical_key(d["steps"]), miles_ref.canonical_key(d["constraint"]))
        for m, d in miles_ref.GATE_DEFAULTS.items()
    }
    assert got == want


def test_cold_start_then_a_3x_grad_norm_drift_agrees_with_miles(checkout, tmp_path):
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    for i in (1, 2, 3):
        # switched to enforce, the same run before it is recorded: a cold start passes
        cold = enforced(checkout, tmp_path, capture_run(tmp_path / f"pre{i}", seed=i), url)
        mv, res, verdict = both_gates(checkout, tmp_path, miles, url, i)
        assert cold == gate_code(mv) == 0
        assert verdict["run"]["history"]["trusted"] is True  # a cold start seeds
        assert miles_ref.trusted(mv)
        assert statuses(verdict) == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
        series = json.loads(verdict["run"]["history"]["series"])
        assert series == {"config.backend": "cuda", "config.suite": SUITE,
                          "config.test_path": TEST_PATH}  # from the record's path
    first = json.loads((tmp_path / "v1.json").read_text())
    assert set(statuses(first).values()) == {"skip"}  # cold start: inactive, seeds

    drift = enforced(checkout, tmp_path, capture_run(tmp_path / "pre4", seed=4, grad_scale=3.0),
                     url)
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 4, grad_scale=3.0)
    assert drift == gate_code(mv) == 1  # enforce: the drift fails the job
    # shadow (shipped): exit 0, as miles' hook, but the drift is visible and untrusted
    assert verdict["run"]["history"]["trusted"] is False
    assert "miles-history/grad-norm" in res.stdout and "shadow" in res.stdout, res.stdout
    assert not miles_ref.trusted(mv)
    got = statuses(verdict)
    assert got == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
    assert got["grad-norm"] == "fail" and list(got.values()).count("pass") == 6
    grad = next(r for r in verdict["results"] if r["rule"] == "grad-norm")
    assert "mean of 3 trusted" in grad["message"]

    # the untrusted drift never enters the baseline: the next normal run passes in both
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 5)
    assert miles_ref.trusted(mv) and verdict["run"]["history"]["trusted"] is True
    assert set(statuses(verdict).values()) == {"pass"}
    miles.close()


def test_a_duplicate_step_is_an_error_on_that_metric_only(checkout, tmp_path):
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    both_gates(checkout, tmp_path, miles, url, 1)
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 2, dup_step=True)
    got = statuses(verdict)
    assert got == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
    assert got["grad-norm"] == "error" and list(got.values()).count("pass") == 6
    assert verdict["run"]["history"]["trusted"] is False
    with open_store(url) as store:
        (r2, _) = store.runs()
        # miles writes no value for a spec whose selection failed; the others are kept
        assert r2.run_id == "r2" and r2.values == 3 * 6 + 6 + 1 + 1
    miles.close()


def build_miles_history(tmp_path: Path, checkout: Path, n: int) -> tuple[str, list[str]]:
    """A miles SQLite history of `n` nightly runs written by miles' gate hook."""
    path = str(tmp_path / "miles-history.db")
    miles = miles_ref.MilesStore(path)
    for i in range(1, n + 1):
        record = capture_run(tmp_path / f"hist{i}", seed=100 + i, grad_scale=3.0 if i == 3 else 1)
        mv = miles_ref.evaluate(miles, IDENTITY, record)
        miles.write_run(IDENTITY, f"c{i}", f"2026-02-{i:02d}T03:00:00.000000+00:00",
                        miles_ref.trusted(mv), miles_ref.values_to_write(record, mv))
    miles.close()
    return path, [capture_run(tmp_path / f"new{k}", seed=200 + k, grad_scale=s)
                  for k, s in enumerate((1.0, 1.6, 0.5))]


def test_an_imported_miles_database_gates_the_same(checkout, tmp_path, store_url):
    miles_db, candidates = build_miles_history(tmp_path, checkout, 6)
    out = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert out.returncode == 0, out.stderr
    assert "imported 6 miles run(s) (5 trusted" in out.stdout
    again = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert "imported 0 miles run(s)" in again.stdout and "6 already present" in again.stdout
    miles = miles_ref.MilesStore(miles_db)
    for k, record in enumerate(candidates):
        mv = miles_ref.evaluate(miles, IDENTITY, record)
        res = gatekeeper("check", record, "-p", PACK, "--history", store_url, *SHADOW,
                         "--json", str(tmp_path / f"i{k}.json"), cwd=checkout)
        verdict = json.loads((tmp_path / f"i{k}.json").read_text())
        assert statuses(verdict) == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
        assert res.returncode == 0, res.stdout + res.stderr
        assert enforced(checkout, tmp_path, record, store_url) == gate_code(mv)
    assert not miles_ref.trusted(miles_ref.evaluate(miles, IDENTITY, candidates[1]))
    miles.close()


def test_gk_tables_share_the_miles_database(checkout, tmp_path):
    miles_db, candidates = build_miles_history(tmp_path, checkout, 3)
    assert gatekeeper("history", "import", miles_db, "--history", miles_db).returncode == 0
    res = gatekeeper("check", candidates[0], "-p", PACK, "--history", miles_db, "--record",
                     "--run-id", "gk1", *SHADOW, cwd=checkout)
    assert res.returncode == 0, res.stdout + res.stderr
    with sqlite3.connect(miles_db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "metric_values", "gk_runs", "gk_series", "gk_points"} <= tables
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 3  # miles' untouched
    with open_store(miles_db) as store:
        assert [r.run_id for r in store.runs()][0] == "gk1" and len(store.runs()) == 4


def test_import_from_postgres(checkout, tmp_path, pg_url):
    miles_db, candidates = build_miles_history(tmp_path, checkout, 4)
    miles_ref.copy_to_postgres(miles_db, pg_url)
    url = str(tmp_path / "from-pg.db")
    out = gatekeeper("history", "import", pg_url, "--history", url)
    assert out.returncode == 0 and "imported 4 miles run(s) (3 trusted" in out.stdout
    miles = miles_ref.MilesStore(miles_db)
    mv = miles_ref.evaluate(miles, IDENTITY, candidates[1])
    gatekeeper("check", candidates[1], "-p", PACK, "--history", url,
               "--json", str(tmp_path / "pg.json"), cwd=checkout)
    verdict = json.loads((tmp_path / "pg.json").read_text())
    assert statuses(verdict) == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
    miles.close()


def test_not_a_miles_database_is_refused(tmp_path):
    bogus = tmp_path / "other.db"
    with sqlite3.connect(bogus) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER)")
    out = gatekeeper("history", "import", str(bogus), "--history", str(tmp_path / "gk.db"))
    assert out.returncode == 2 and "not a miles metric-history database" in out.stderr
    assert "lacks run_id, test_path" in out.stderr


def test_the_attempt_directory_judges_as_its_merged_record(checkout, tmp_path):
    """Per-process files read as a directory merge as miles' harness merges them."""
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    for i in (1, 2):
        both_gates(checkout, tmp_path, miles, url, i)
    merged = capture_run(tmp_path / "records3", seed=3, grad_scale=1.7)
    attempt_dir = merged.removesuffix(".merged.jsonl")
    _, by_file = gk_check(checkout, merged, url, "m", tmp_path / "m.json")
    _, by_dir = gk_check(checkout, attempt_dir, url, "d", tmp_path / "d.json")
    assert statuses(by_dir) == statuses(by_file)
    assert statuses(by_dir)["grad-norm"] == "fail"
    assert by_dir["run"]["history"]["series"] == by_file["run"]["history"]["series"]
    miles.close()


def test_identity_outside_a_miles_checkout_is_an_error_not_a_guess(tmp_path):
    record = capture_run(tmp_path / "records", seed=1)
    out = gatekeeper("check", record, "-p", PACK, "--history", str(tmp_path / "gk.db"),
                     cwd=tmp_path)
    assert out.returncode == 2
    assert "series key 'config.test_path' is not set" in out.stderr
    ident = ("--config", f"test_path={TEST_PATH}", "--config", "backend=cuda",
             "--config", f"suite={SUITE}")
    # which metrics the test declares is not guessed either: no test file, no ci_gate
    undeclared = gatekeeper("check", record, "-p", PACK, "--history", str(tmp_path / "gk.db"),
                            *ident, cwd=tmp_path)
    assert undeclared.returncode == 2, undeclared.stdout + undeclared.stderr
    assert "--config 'ci_gate=[train/grad_norm, train/ppo_kl]'" in undeclared.stderr
    given = gatekeeper("check", record, "-p", PACK, "--history", str(tmp_path / "gk.db"),
                       *ident, "--config", f"ci_gate=[{', '.join(RULE_OF)}]",
                       "--json", str(tmp_path / "v.json"), cwd=tmp_path)
    # shadow: nothing gating was judged, and the pack says why that passes (exit 0)
    assert given.returncode == 0, given.stdout + given.stderr
    assert "nothing judged (allowed: policy miles-history: miles' history gate" in given.stdout
    assert set(statuses(json.loads((tmp_path / "v.json").read_text())).values()) == {"skip"}
    series = json.loads((tmp_path / "v.json").read_text())["run"]["history"]["series"]
    assert series == miles_series()


def miles_series() -> str:
    from gatekeeper.history.miles import series_of

    return series_of(*IDENTITY)


def test_rules_must_agree_on_the_series(tmp_path):
    from gatekeeper.baselines import series_keys
    from gatekeeper.errors import ConfigError
    from gatekeeper.policy.loader import load_policies

    pol = tmp_path / "p.yaml"
    pol.write_text(
        "version: 1\nname: p\nrules:\n"
        "  - {id: a, metric: m, check: {history: {rel_up: 1, rel_down: 1, series: [name]}}}\n"
        "  - {id: b, metric: n, check: {history: {rel_up: 1, rel_down: 1, series: [tags]}}}\n"
    )
    policies = load_policies([str(pol)])
    with pytest.raises(ConfigError, match=r"disagree on the run series: \['name'\]"):
        series_keys(policies, None)
    assert series_keys(policies, ("config.x",)) == ("config.x",)


def test_without_a_store_the_pack_is_inert_even_on_metrics_a_run_lacks(tmp_path):
    record = tmp_path / "other.jsonl"
    record.write_text(json.dumps({"metric": "train/loss", "series": [[0, 1.0]]}) + "\n")
    out = gatekeeper("check", str(record), "-p", PACK, "--json", str(tmp_path / "v.json"),
                     env={"GATEKEEPER_HISTORY": ""})
    # inert: nothing judged, which the shadow pack allows with its reason, shown (exit 0)
    assert out.returncode == 0, out.stdout + out.stderr
    head, why = out.stdout.splitlines()[:2]
    assert head == "gate PASSED: other: 7 skip", out.stdout
    assert why.startswith("  nothing judged (allowed: "), out.stdout
    results = json.loads((tmp_path / "v.json").read_text())["results"]
    assert {r["status"] for r in results} == {"skip"}
    assert all("no baseline store given" in r["message"] for r in results)
    # with a store, an undeclared metric is a visible SKIP; a declared one the record
    # never logs is an ERROR (miles: "required metric ... missing from record")
    stored = gatekeeper("check", str(record), "-p", PACK, "--history", str(tmp_path / "h.db"),
                        "--config", "test_path=t.py", "--config", "backend=cuda",
                        "--config", "suite=s", "--config", "ci_gate=[train/grad_norm]",
                        "--json", str(tmp_path / "s.json"))
    assert stored.returncode == 0, stored.stdout + stored.stderr  # shadow: never fails CI
    got = statuses(json.loads((tmp_path / "s.json").read_text()))
    assert got.pop("grad-norm") == "error" and set(got.values()) == {"skip"}
    results = json.loads((tmp_path / "s.json").read_text())["results"]
    assert all("not declared by register_ci_gate in config.ci_gate" in r["message"]
               for r in results if r["rule"] != "grad-norm"), results


def test_a_non_finite_value_errors_that_metric_and_records_nothing_of_it(checkout, tmp_path):
    """The per-metric ERROR path a null step also takes: miles' selection fails, the gate
    writes no value for that spec and judges the rest."""
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    both_gates(checkout, tmp_path, miles, url, 1)
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 2, nan_kl_at=3)
    got = statuses(verdict)
    assert got == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
    assert got["ppo-kl"] == "error" and list(got.values()).count("pass") == 6
    with open_store(url) as store:
        assert store.runs()[0].values == len(miles_ref.values_to_write(
            capture_run(tmp_path / "again", seed=2, nan_kl_at=3), mv)) == 3 * 6 + 6 + 2
        kl = store.baseline(miles_series(), *history_prefix("train/ppo_kl"))
        assert all(len(v) == 1 for v in kl.values())  # run 1 only: run 2 stored no kl
    miles.close()


def history_prefix(metric: str) -> tuple[str, str, str]:
    spec = miles_ref.GATE_DEFAULTS[metric]
    return metric, miles_ref.canonical_key(spec["steps"]), miles_ref.canonical_key(
        spec["constraint"]
    )


def test_a_miles_run_with_two_values_at_one_coordinate_is_refused_not_guessed(tmp_path):
    miles = miles_ref.MilesStore(str(tmp_path / "m.db"))
    row = ("train/grad_norm", '"all"', '{"rel_up":0.5}', 0, 0.1)
    miles.write_run(IDENTITY, "c1", "2026-01-01T00:00:00.000000+00:00", True, [row, row])
    miles.close()
    out = gatekeeper("history", "import", str(tmp_path / "m.db"), "--history",
                     str(tmp_path / "gk.db"))
    assert out.returncode == 2 and "holds two values at train/grad_norm" in out.stderr
    with open_store(str(tmp_path / "gk.db")) as store:
        assert store.runs() == []  # nothing half-imported


def test_only_declared_metrics_are_gated_and_a_declared_one_missing_untrusts(tmp_path):
    """G9/G10: evaluate_gate judges the file's register_ci_gate specs only; a declared
    metric absent from the record is ERROR and untrusts the run; undeclared ones are not
    gated (a 3x grad_norm drift passes when grad_norm is not declared)."""
    declared = ["train/ppo_kl", "rollout/tito_session_mismatch_rate/v1/assistant_text"]
    checkout = write_checkout(tmp_path, declared)
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    both_gates(checkout, tmp_path, miles, url, 1, declared=declared)
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 2, declared=declared,
                                  grad_scale=3.0)
    got = statuses(verdict)
    assert {RULE_OF[m]: rule_status(s) for m, s in mv.items()} == {
        "ppo-kl": "pass", "tito-mismatch-v1": "pass"}
    assert got == {**{r: "skip" for r in RULE_OF.values()}, "ppo-kl": "pass",
                   "tito-mismatch-v1": "pass"}
    grad = next(r for r in verdict["results"] if r["rule"] == "grad-norm")
    assert f"not declared by register_ci_gate in {TEST_PATH}" in grad["message"]
    assert verdict["run"]["history"]["trusted"] is True and miles_ref.trusted(mv)
    record = capture_run(tmp_path / "again2", seed=2, grad_scale=3.0)
    assert verdict["run"]["history"]["values"] == len(miles_ref.values_to_write(record, mv))

    tito = "rollout/tito_session_mismatch_rate/v1/assistant_text"
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 3, declared=declared,
                                  drop=(tito,))
    assert mv[tito] == {None: "error"} and not miles_ref.trusted(mv)
    got = statuses(verdict)
    assert got["tito-mismatch-v1"] == "error" and got["ppo-kl"] == "pass"
    assert verdict["run"]["history"]["trusted"] is False
    missing = capture_run(tmp_path / "pre3", seed=3, drop=(tito,))
    assert enforced(checkout, tmp_path, missing, url) == gate_code(mv) == 1
    miles.close()


def test_a_file_declaring_no_gate_is_vacuously_trusted(tmp_path):
    checkout = write_checkout(tmp_path, [])
    url = str(tmp_path / "gk.db")
    miles = miles_ref.MilesStore(str(tmp_path / "miles.db"))
    mv, res, verdict = both_gates(checkout, tmp_path, miles, url, 1, declared=[])
    assert mv == {} and miles_ref.trusted(mv)
    assert set(statuses(verdict).values()) == {"skip"}
    assert verdict["run"]["history"]["trusted"] is True
    assert verdict["run"]["history"]["values"] == 0
    miles.close()


def test_a_declaration_the_pack_cannot_judge_is_refused(tmp_path):
    checkout = write_checkout(tmp_path, ["train/ppo_kl"])
    test = checkout / TEST_PATH
    test.write_text(test.read_text() + 'register_ci_gate(metric_key="train/grad_norm", '
                    'steps=[0, 1], constraint={"rel_up": 0.1, "rel_down": 0.1})\n')
    record = capture_run(tmp_path / "records", seed=1)
    out = gatekeeper("check", record, "-p", PACK, "--history", str(tmp_path / "gk.db"),
                     *SHADOW, cwd=checkout)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "register_ci_gate(metric_key='train/grad_norm', steps=[0, 1]" in out.stderr
    assert "has no history rule with that metric, steps and constraint" in out.stderr
