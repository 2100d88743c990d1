"""Trust revoked in miles after an import reaches gatekeeper on the next import (G12).

miles revokes trust with `mark_untrusted` (tests/history/miles_ref.py mirrors
storage/sqlite_store.py of radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76: one
of run_id / github_run_id / commit_sha); gatekeeper with `history mark-untrusted`.
Neither re-trusts, so a re-import keeps a run trusted only while both stores trust it.
The miles store is a real SQLite file written by the mirror, or the same rows on a real
PostgreSQL; the gatekeeper store is SQLite and PostgreSQL (the contract suite's cluster).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from gatekeeper.history import open_store
from tests.helpers import gatekeeper
from tests.history import miles_ref
from tests.history.test_miles_pack import (
    IDENTITY,
    PACK,
    RULE_OF,
    capture_run,
    rule_status,
    statuses,
    write_checkout,
)

SERIES = json.dumps(
    {"config.backend": "cuda", "config.suite": IDENTITY[2], "config.test_path": IDENTITY[0]},
    sort_keys=True, separators=(",", ":"),
)


def miles_history(tmp_path: Path, scales: list[float]) -> tuple[str, list[str]]:
    """A miles SQLite history, one nightly per scale (grad_norm scaled), written by the
    mirror's gate hook; the run ids oldest first."""
    path = str(tmp_path / "miles.db")
    miles = miles_ref.MilesStore(path)
    ids = []
    for i, scale in enumerate(scales, 1):
        record = capture_run(tmp_path / f"hist{i}", seed=300 + i, grad_scale=scale)
        mv = miles_ref.evaluate(miles, IDENTITY, record)
        ids.append(miles.write_run(IDENTITY, f"c{i}", f"2026-03-{i:02d}T03:00:00.000000+00:00",
                                   miles_ref.trusted(mv), miles_ref.values_to_write(record, mv)))
    miles.close()
    return path, ids


def trust_here(url: str) -> dict[str, bool]:
    with open_store(url) as store:
        return {r.run_id: r.trusted for r in store.runs(series=SERIES)}


def judge_both(checkout: Path, miles_db: str, url: str, record: str, out: Path) -> dict:
    """miles' gate on its store and the pack on the imported one: the same statuses."""
    miles = miles_ref.MilesStore(miles_db)
    mv = miles_ref.evaluate(miles, IDENTITY, record)
    miles.close()
    res = gatekeeper("check", record, "-p", PACK, "--history", url, "--json", str(out),
                     cwd=checkout)
    assert res.returncode == 0, res.stdout + res.stderr  # shadow
    got = statuses(json.loads(out.read_text()))
    assert got == {RULE_OF[m]: rule_status(s) for m, s in mv.items()}
    return got


def test_a_revocation_in_miles_reaches_gatekeeper_on_reimport(tmp_path, store_url):
    checkout = write_checkout(tmp_path)
    # run 3 (grad x2.2) is what the candidate is judged against once 1 and 2 are gone
    miles_db, ids = miles_history(tmp_path, [1.0, 1.0, 2.2])
    first = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert first.returncode == 0 and "imported 3 miles run(s) (2 trusted" in first.stdout
    assert trust_here(store_url) == dict(zip(ids, [True, True, False], strict=True))

    candidate = capture_run(tmp_path / "cand", seed=1, grad_scale=2.2)
    assert judge_both(checkout, miles_db, store_url, candidate, tmp_path / "a.json")[
        "grad-norm"] == "fail"  # against runs 1 and 2 (run 3 drifted: untrusted)

    miles = miles_ref.MilesStore(miles_db)
    assert miles.mark_untrusted(run_id=ids[0]) == 1
    assert miles.mark_untrusted(commit_sha="c2") == 1
    miles.close()
    # before the re-import gatekeeper still trusts them: the stores disagree
    assert trust_here(store_url)[ids[0]] is True
    again = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert again.returncode == 0, again.stderr
    assert "imported 0 miles run(s)" in again.stdout and "3 already present" in again.stdout
    assert "2 run(s) now untrusted here too" in again.stdout
    assert ids[0] in again.stdout and ids[1] in again.stdout
    assert trust_here(store_url) == dict.fromkeys(ids, False)
    # both gates now have no trusted history: a cold start, in both
    got = judge_both(checkout, miles_db, store_url, candidate, tmp_path / "b.json")
    assert set(got.values()) == {"skip"}
    # a third import changes nothing and says nothing about trust
    third = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert "untrusted" not in third.stdout, third.stdout


def test_a_revocation_here_is_kept_though_miles_still_trusts(tmp_path, store_url):
    miles_db, ids = miles_history(tmp_path, [1.0, 1.0])
    assert gatekeeper("history", "import", miles_db, "--history", store_url).returncode == 0
    marked = gatekeeper("history", "mark-untrusted", "--history", store_url, "--run-id", ids[1])
    assert marked.returncode == 0 and "1 run(s) marked untrusted" in marked.stdout
    again = gatekeeper("history", "import", miles_db, "--history", store_url)
    assert again.returncode == 0, again.stderr
    assert "untrusted here, still trusted in miles: 1 run(s) kept untrusted" in again.stdout
    assert ids[1] in again.stdout and ids[0] not in again.stdout
    assert trust_here(store_url) == {ids[0]: True, ids[1]: False}
    with sqlite3.connect(miles_db) as conn:  # the miles store is only read
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE trusted = 1").fetchone()[0] == 2


def test_a_revocation_in_a_postgres_miles_store_syncs(tmp_path, pg_url):
    """miles' production store is PostgreSQL (Neon): its mark_untrusted is the same UPDATE
    on a BOOLEAN column."""
    import psycopg

    miles_db, ids = miles_history(tmp_path, [1.0, 1.0, 1.0])
    miles_ref.copy_to_postgres(miles_db, pg_url)
    url = str(tmp_path / "gk.db")
    assert gatekeeper("history", "import", pg_url, "--history", url).returncode == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        cur = conn.execute("UPDATE runs SET trusted = false WHERE commit_sha = %s "
                           "AND trusted = true", ("c3",))
        assert cur.rowcount == 1
    again = gatekeeper("history", "import", pg_url, "--history", url)
    assert again.returncode == 0 and "1 run(s) now untrusted here too" in again.stdout
    assert trust_here(url) == {ids[0]: True, ids[1]: True, ids[2]: False}


def _edited(tmp_path: Path, sql: str) -> str:
    """A two-run miles history (written by the mirror) with `sql` run on it."""
    miles_db, _ = miles_history(tmp_path, [1.0, 1.1])
    with sqlite3.connect(miles_db) as conn:
        conn.execute(sql)
    return miles_db


def test_a_value_row_miles_never_writes_is_exit_2_naming_the_store(tmp_path):
    """miles writes step INTEGER, value REAL; sqlite keeps whatever a hand edit gives. A
    text there was exit 70 (int()/float() while importing), a step 1.5 became 1. Each is
    exit 2 naming the store, the run and the metric."""
    cases = (("UPDATE metric_values SET value = 'abc' WHERE rowid = 1", '"abc"'),
             ("UPDATE metric_values SET step = 'x' WHERE rowid = 1", '"x"'),
             ("UPDATE metric_values SET step = 1.5 WHERE rowid = 1", "1.5"))
    for i, (sql, shown) in enumerate(cases):
        where = tmp_path / f"case{i}"
        where.mkdir()
        miles_db = _edited(where, sql)
        out = gatekeeper("history", "import", miles_db, "--history", str(where / "gk.db"))
        assert out.returncode == 2, out.stdout + out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith(f"gatekeeper: error: miles store {miles_db}: run "), line
        assert shown in line and "not a whole step and a number" in line, line


def test_a_run_miles_does_not_read_as_trusted_is_imported_untrusted(tmp_path):
    """miles reads its baseline `WHERE trusted = 1` (storage/sqlite_store.py at the commit
    miles_ref mirrors): a run whose trusted is 2 or a text is not in it. It was imported
    trusted (Python's bool()); now as miles reads it."""
    miles_db = _edited(tmp_path, "UPDATE runs SET trusted = 2")
    store = str(tmp_path / "gk.db")
    assert gatekeeper("history", "import", miles_db, "--history", store).returncode == 0
    with open_store(store) as s:
        assert [r.trusted for r in s.runs()] == [False, False]
