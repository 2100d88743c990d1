"""Store layout: gatekeeper's first layout is refused until migrated, never reset; the
reference mean is summed as CPython's sum() sums miles' newest-first values
(radixark/miles 31f1ca961a94, tests/ci/metric_history/gate.py:
`baseline_mean = sum(trusted_values) / len(trusted_values)`)."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from gatekeeper.engine import evaluate
from gatekeeper.errors import StateError
from gatekeeper.history import Baselines, RuleBaseline, is_postgres, open_store
from gatekeeper.history.base import python_sum
from gatekeeper.history.legacy import POSTGRES_DDL, SQLITE_DDL
from gatekeeper.verdict import Status
from tests.checks.util import policy, run_of, series
from tests.helpers import gatekeeper

SERIES = '{"name":"grpo"}'
OLD_STEPS = '{"kind":"list","steps":[0,1]}'
OLD_CHECK = '{"history":{"last_n":5,"rel_down":0.2,"rel_up":0.2}}'


def build_old_store(url: str) -> None:
    """Three runs (one untrusted) written the way the first layout wrote them."""
    rows = [(1, "a", 1.0, True), (2, "b", 2.0, True), (3, "c", 9.0, False)]
    if is_postgres(url):
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        ddl, p = POSTGRES_DDL, "%s"
    else:
        conn = sqlite3.connect(url)
        ddl, p = SQLITE_DDL, "?"
    cur = conn.cursor()
    for stmt in ddl:
        cur.execute(stmt)
    for seq, run_id, v, trusted in rows:
        cur.execute(
            f"INSERT INTO runs (run_id, series, commit_sha, trusted, created_at) "
            f"VALUES ({p}, {p}, {p}, {p}, {p})",
            (run_id, SERIES, f"c{seq}", trusted, f"2026-01-0{seq}T00:00:00+00:00"),
        )
        for step in (0, 1):
            cur.execute(
                f"INSERT INTO metric_values VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                (seq, "train/ppo_kl", OLD_STEPS, OLD_CHECK, step, v + step),
            )
    if not is_postgres(url):
        conn.commit()
    conn.close()


def test_old_layout_is_refused_then_migrated(store_url, tmp_path):
    build_old_store(store_url)
    with pytest.raises(StateError, match="old layout .* `gatekeeper history migrate"):
        open_store(store_url)
    pol = tmp_path / "p.yaml"
    pol.write_text(
        "version: 1\nname: p\nrules:\n  - id: kl\n    metric: train/ppo_kl\n"
        "    steps: [0, 1]\n    check: {history: {rel_up: 0.2, rel_down: 0.2, last_n: 3}}\n"
    )
    rec = tmp_path / "r.jsonl"
    rec.write_text(json.dumps({"metric": "train/ppo_kl", "series": [[0, 1.5], [1, 2.5]]}) + "\n")
    refused = gatekeeper("check", str(rec), "-p", str(pol), "--history", store_url,
                         "--name", "grpo")
    assert refused.returncode == 2 and "history migrate" in refused.stderr

    out = gatekeeper("history", "migrate", "--history", store_url)
    assert out.returncode == 0 and "converted 3 run(s)" in out.stdout, out.stderr
    with open_store(store_url) as store:
        # keys now in miles' form, last_n left out of the identity; trust kept
        got = store.baseline(SERIES, "train/ppo_kl", "[0,1]", '{"rel_down":0.2,"rel_up":0.2}')
        assert got == {0: [2.0, 1.0], 1: [3.0, 2.0]}
        assert [(r.run_id, r.trusted, r.values) for r in store.runs()] == [
            ("c", False, 2), ("b", True, 2), ("a", True, 2)
        ]
    # the old rows stay, renamed; judging now reads the converted baseline (ref 1.5, 2.5)
    ok = gatekeeper("check", str(rec), "-p", str(pol), "--history", store_url,
                    "--series-key", "name", "--name", "grpo")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    again = gatekeeper("history", "migrate", "--history", store_url)
    assert again.returncode == 0 and "nothing to convert" in again.stdout


def test_sums_as_cpython_sum_does():
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((20, 400)) * 10.0 ** rng.integers(-9, 9, (20, 400))
    taken = rng.random((20, 400)) < 0.8
    got = python_sum(matrix, taken)
    for j in range(matrix.shape[1]):
        assert got[j] == sum(matrix[taken[:, j], j].tolist())  # exact, bit for bit


def neumaier(values: list[float]) -> float:
    """CPython 3.12's float sum (Python/bltinmodule.c, builtin_sum_impl), in Python."""
    total, comp = 0.0, 0.0
    for x in values:
        t = total + x
        comp += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
        total = t
    return total + comp if comp and math.isfinite(comp) else total


@pytest.mark.parametrize("compensated", [False, True])
def test_both_cpython_summations(compensated):
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((20, 300)) * 10.0 ** rng.integers(-12, 12, (20, 300))
    taken = np.ones(matrix.shape, bool)
    got = python_sum(matrix, taken, compensated=compensated)
    for j in range(matrix.shape[1]):
        col = matrix[:, j].tolist()
        want = neumaier(col) if compensated else _left_to_right(col)
        assert got[j] == want


def _left_to_right(values: list[float]) -> float:
    total = 0.0
    for v in values:
        total += v
    return total


def test_a_value_exactly_on_miles_edge_passes_and_one_ulp_beyond_fails(tmp_path):
    past = [0.1, 0.2, 0.7, 1e-17, 0.3, 0.30000000000000004, 0.1]
    ref = sum(past) / len(past)  # miles' reference, newest first
    hi = ref + max(0.5 * abs(ref), 0.02)
    pol = policy(
        tmp_path,
        "  - {id: h, metric: m, steps: [0], check: {history: {rel_up: 0.5, abs_floor_up: 0.02,"
        " rel_down: 0.8, abs_floor_down: 0.02}}}\n",
    )
    base = Baselines({"p/h": RuleBaseline({0: past})}, "mem")
    on_edge = evaluate(pol, run_of(series("m", [hi])), history=base).results[0]
    beyond = evaluate(pol, run_of(series("m", [math.nextafter(hi, 2)])), history=base).results[0]
    assert on_edge.status is Status.PASS and beyond.status is Status.FAIL
