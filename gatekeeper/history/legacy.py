"""gatekeeper's first store layout (up to commit 7ed4836), kept as data: `history
migrate` converts it, tests build it, and bench/bench_history.py measures it against
today's layout. Nothing reads baselines from it any more."""

from __future__ import annotations

SQLITE_DDL = (
    """CREATE TABLE IF NOT EXISTS runs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL UNIQUE,
        series TEXT NOT NULL,
        commit_sha TEXT,
        trusted INTEGER NOT NULL,
        created_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS metric_values (
        run_seq INTEGER NOT NULL REFERENCES runs(seq),
        metric TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        check_key TEXT NOT NULL,
        step INTEGER NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_seq, metric, steps_key, check_key, step))""",
    "CREATE INDEX IF NOT EXISTS runs_baseline ON runs (series, trusted, seq DESC)",
    "CREATE INDEX IF NOT EXISTS values_coordinate ON metric_values (metric, steps_key, check_key)",
    "CREATE INDEX IF NOT EXISTS runs_commit ON runs (commit_sha)",
)

POSTGRES_DDL = tuple(
    stmt.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    .replace("trusted INTEGER", "trusted BOOLEAN")
    .replace("run_seq INTEGER", "run_seq BIGINT")
    .replace("step INTEGER", "step BIGINT")
    .replace("value REAL", "value DOUBLE PRECISION")
    for stmt in SQLITE_DDL
)

# Its baseline read: newest `limit` trusted values per step, one row per value.
BASELINE = """
SELECT step, value FROM (
  SELECT v.step AS step, v.value AS value,
         ROW_NUMBER() OVER (PARTITION BY v.step ORDER BY r.seq DESC) AS rn
  FROM metric_values v JOIN runs r ON r.seq = v.run_seq
  WHERE r.series = {p} AND r.trusted = {p}
    AND v.metric = {p} AND v.steps_key = {p} AND v.check_key = {p}
) ranked WHERE rn <= {p} ORDER BY step, rn
"""
