"""One contract, every backend: the same runs in, the same trusted values out."""

from __future__ import annotations

import math

import pytest

from gatekeeper.errors import StateError
from gatekeeper.history import Coordinate, RunRecord, open_store

SERIES = '{"config.backend":"megatron","config.test_path":"tests/e2e/test_grpo.py"}'
KL0 = Coordinate("train/ppo_kl", '{"kind":"list","steps":[0]}', '{"history":{"rel_up":0.2}}', 0)
KL1 = Coordinate(KL0.metric, KL0.steps_key, KL0.check_key, 1)


def rec(
    run_id: str,
    value: float,
    *,
    trusted: bool = True,
    commit: str | None = None,
    series: str = SERIES,
    extra: dict | None = None,
) -> RunRecord:
    return RunRecord.of(
        run_id, series, trusted, {KL0: value, KL1: value * 10, **(extra or {})}, commit
    )


def test_newest_trusted_first_with_a_limit(store):
    for i in range(5):
        store.record(rec(f"r{i}", float(i)))
    store.record(rec("bad", 99.0, trusted=False))
    got = store.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key, limit=3)
    assert got == {0: [4.0, 3.0, 2.0], 1: [40.0, 30.0, 20.0]}


def test_series_and_coordinates_never_mix(store):
    other_check = Coordinate(KL0.metric, KL0.steps_key, '{"history":{"rel_up":0.5}}', 0)
    store.record(rec("a", 1.0, extra={other_check: 7.0}))
    store.record(rec("b", 2.0, series='{"name":"other"}'))
    assert store.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key)[0] == [1.0]
    assert store.baseline(SERIES, KL0.metric, KL0.steps_key, other_check.check_key) == {0: [7.0]}
    assert store.baseline(SERIES, "train/other", KL0.steps_key, KL0.check_key) == {}


def test_mark_untrusted_by_run_id_and_by_commit_keeps_rows(store):
    store.record(rec("a", 1.0, commit="c1"))
    store.record(rec("b", 2.0, commit="c2"))
    store.record(rec("c", 3.0, commit="c2"))
    assert store.mark_untrusted(run_id="a") == 1
    assert store.mark_untrusted(commit="c2") == 2
    assert store.mark_untrusted(commit="nope") == 0
    assert store.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key) == {}
    runs = store.runs()
    assert [(r.run_id, r.trusted, r.values) for r in runs] == [
        ("c", False, 2),
        ("b", False, 2),
        ("a", False, 2),
    ]
    with pytest.raises(StateError, match="exactly one"):
        store.mark_untrusted()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_never_enter_the_store(store, bad):
    with pytest.raises(StateError, match="non-finite"):
        store.record(rec("x", bad))
    assert store.runs() == []


def test_recording_a_run_again_replaces_it(store):
    store.record(rec("a", 1.0))
    store.record(rec("a", 5.0, trusted=False))
    assert store.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key) == {}
    (only,) = store.runs()
    assert only.run_id == "a" and not only.trusted


def test_data_survives_reopening(store_url):
    with open_store(store_url) as s:
        s.record(rec("a", 1.5))
    with open_store(store_url) as s:
        assert s.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key)[0] == [1.5]
        assert [r.series for r in s.runs(series=SERIES)] == [SERIES]
        assert s.runs(series="nope") == []


TWICE_STEP_1 = "0100000000000000" * 2  # two int64 steps 1, 1 (little-endian)
DAMAGES = {  # (sqlite, postgres): rows `pack` never writes
    "more steps than values": ("UPDATE gk_points SET n = n + 4",) * 2,
    "steps that do not increase": (f"UPDATE gk_points SET steps = x'{TWICE_STEP_1}'",
                                   f"UPDATE gk_points SET steps = '\\x{TWICE_STEP_1}'::bytea"),
    # sqlite keeps a text in a BLOB column; PostgreSQL's BYTEA takes 2 bytes for 16
    "values that are no float64s": ("UPDATE gk_points SET vals = 'abc'",
                                    "UPDATE gk_points SET vals = '\\x0102'::bytea"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_baseline_row_is_an_error_naming_the_store_and_run(store_url, damage):
    """A store edited by hand or damaged: a row `pack` did not write was exit 70 (numpy's
    frombuffer, a broadcast in the baseline's stats) or, steps out of order, judged. It
    is a StateError (exit 2) naming the store and the run, and how to leave the run out."""
    postgres = store_url.startswith("postgresql")
    sql = DAMAGES[damage][postgres]
    with open_store(store_url) as s:
        s.record(RunRecord.of("a", SERIES, True, {KL0: 1.5, KL1: 2.5}, None))
    if postgres:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(sql)
    else:
        import sqlite3

        with sqlite3.connect(store_url) as conn:
            conn.execute(sql)
    with open_store(store_url) as s, pytest.raises(StateError) as err:
        s.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key)
    text = str(err.value)
    assert "run a's baseline of train/ppo_kl is damaged" in text, text
    assert "mark-untrusted --run-id a" in text, text


def test_unreachable_postgres_is_a_clear_error_without_the_password():
    with pytest.raises(StateError) as err:
        open_store("postgresql://ci:s3cret@127.0.0.1:1/none")
    assert "cannot connect" in str(err.value) and "s3cret" not in str(err.value)


def test_a_dml_only_role_opens_existing_tables(pg_url):
    """miles' Neon application role may not create tables; once gk_* exist, opening the
    store issues no DDL."""
    import psycopg

    with open_store(pg_url) as s:
        s.record(rec("a", 1.0))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE ROLE ci_app LOGIN")
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        admin.execute("GRANT USAGE ON SCHEMA public TO ci_app")
        admin.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ci_app"
        )
        admin.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ci_app")
    app_url = pg_url.replace("postgres@", "ci_app@")
    with open_store(app_url) as s:
        s.record(rec("b", 2.0))
        assert s.baseline(SERIES, KL0.metric, KL0.steps_key, KL0.check_key)[0] == [2.0, 1.0]
