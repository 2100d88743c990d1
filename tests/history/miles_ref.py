"""miles' metric-history pipeline, mirrored for tests: capture, merge, store, gate.

Mirrored from radixark/miles at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:
- capture: miles/utils/tracking_utils/ci_history.py (CiHistoryBackend: one
  `<pid>-<uuid>.jsonl` file per process, the 7 TARGET_METRIC_KEYS, non-finite values as
  "NaN"/"Infinity"/"-Infinity", `json.dumps(line, allow_nan=False)`);
- merge: tests/ci/ci_utils.py `_attempt_record_dir`, `_merge_attempt_records`
  (sorted file names, concatenate, stable sort by step with null steps last);
- store: tests/ci/metric_history/storage/sqlite_store.py `_SCHEMA_SQL`, `write_run`,
  `_BASELINE_SQL` (verbatim);
- gate: tests/ci/metric_history/{gate,selection,constraints,register}.py (selection of
  "all"/"last", ref = sum(values) / len(values), corridor lo <= cur <= hi, GATE_DEFAULTS;
  evaluate_gate judges only the file's register_ci_gate specs, a declared metric missing
  from the record is ERROR -- "required metric ... missing from record" -- and a file
  with no spec is vacuously trusted; ci_utils.run_gate_hook never fails CI: shadow).
- trust revocation: storage/sqlite_store.py `mark_untrusted` (exactly one of run_id /
  github_run_id / commit_sha; counts rows whose trust changed).
Only what the tests compare against is mirrored; it is a reference, not a product.

The executing-stage identity is mirrored from miles' PR stack #2700-#2704, at
fa787d5958a9d065077d2f08b92af6581c369f9f (#2702: `evaluate_gate(..., executing_suite=)`
keys the run on the stage `run_suite.py --suite` ran, not `register_cuda_ci(suite=)`),
with the dispatch it guards from 107731c3c8422836378ce4d6a51bfee90e22eaf5 (#2703,
tests/ci/hardware.py: stage arch/GPU table, `auto_arch`, `target_stage`,
`dispatch_targets`) and 5433d57fe9f7106aba8002b359d3d8ac9e76508e (#2701: the required
`register_cuda_ci(hardware=[...])`, home stage on the first supported arch).
"""

# ruff: noqa: E501 - GATE_DEFAULTS and the SQL are kept as miles writes them
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from tests.miles import capture as capture_mod

# The capture and the harness merge are tests/miles/capture.py's (the same miles commit).
TARGET_METRIC_KEYS = capture_mod.TARGET_METRIC_KEYS

GATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "train/grad_norm": {
        "steps": "all",
        "constraint": {"rel_up": 0.5, "abs_floor_up": 0.1, "rel_down": 0.8, "abs_floor_down": 0.1},
    },
    "train/ppo_kl": {
        "steps": "all",
        "constraint": {"rel_up": 0.5, "abs_floor_up": 0.02, "rel_down": 0.8, "abs_floor_down": 0.02},
    },
    "train/train_rollout_logprob_abs_diff": {
        "steps": "all",
        "constraint": {"rel_up": 0.5, "abs_floor_up": 0.02, "rel_down": 0.8, "abs_floor_down": 0.02},
    },
    "train/train_rollout_kl": {
        "steps": "all",
        "constraint": {"rel_up": 0.5, "abs_floor_up": 0.02, "rel_down": 0.8, "abs_floor_down": 0.02},
    },
    "rollout/raw_reward": {
        "steps": "all",
        "constraint": {"rel_up": 0.5, "abs_floor_up": 0.05, "rel_down": 0.2, "abs_floor_down": 0.05},
    },
    "rollout/tito_session_mismatch_rate/v1/assistant_text": {
        "steps": "last",
        "constraint": {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0},
    },
    "rollout/tito_session_mismatch_rate/v2/assistant_text": {
        "steps": "last",
        "constraint": {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0},
    },
}

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id              TEXT PRIMARY KEY,
    test_path           TEXT NOT NULL,
    backend             TEXT NOT NULL,
    suite               TEXT NOT NULL,
    commit_sha          TEXT NOT NULL,
    pr_number           INTEGER,
    github_run_id       INTEGER,
    github_run_attempt  INTEGER,
    event_name          TEXT,
    ref                 TEXT,
    created_at          TEXT NOT NULL,
    trusted             INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS metric_values (
    run_id          TEXT NOT NULL REFERENCES runs(run_id),
    metric_key      TEXT NOT NULL,
    steps_key       TEXT NOT NULL,
    constraint_key  TEXT NOT NULL,
    step            INTEGER NOT NULL,
    value           REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS runs_baseline_idx
    ON runs (test_path, backend, suite, trusted, created_at DESC);
"""

# The same two tables on PostgreSQL (Neon's are provisioned out of band with the same
# columns; neon_store.py issues the same DML against them).
PG_SCHEMA_SQL = (
    """CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, test_path TEXT NOT NULL, backend TEXT NOT NULL,
    suite TEXT NOT NULL, commit_sha TEXT NOT NULL, pr_number INTEGER, github_run_id BIGINT,
    github_run_attempt INTEGER, event_name TEXT, ref TEXT,
    created_at TIMESTAMPTZ NOT NULL, trusted BOOLEAN NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS metric_values (
    run_id TEXT NOT NULL REFERENCES runs(run_id), metric_key TEXT NOT NULL,
    steps_key TEXT NOT NULL, constraint_key TEXT NOT NULL, step INTEGER NOT NULL,
    value DOUBLE PRECISION NOT NULL)""",
)

BASELINE_SQL = """
SELECT mv.value
FROM metric_values mv
JOIN runs r USING (run_id)
WHERE r.test_path = ?
  AND r.backend = ?
  AND r.suite = ?
  AND mv.metric_key = ?
  AND mv.steps_key = ?
  AND mv.constraint_key = ?
  AND mv.step = ?
  AND r.trusted = 1
ORDER BY r.created_at DESC
LIMIT ?
"""


def canonical_key(raw: object) -> str:
    return json.dumps(raw, sort_keys=True, separators=(",", ":"))


encode_value = capture_mod.encode_value


def capture(record_dir: str, logs: list[tuple[int | None, dict[str, float]]]) -> str:
    """One process's CiHistoryBackend: `log(metrics, step)` calls -> its snapshot file."""
    backend = capture_mod.CiCapture(Path(record_dir), os.getpid())
    for step, metrics in logs:
        # tracking.log passes metrics.get(step_key): a missing step key is a null step
        backend.log(metrics if step is None else {**metrics, STEP: step}, STEP)
    return str(backend.path)


STEP = "__step__"


def attempt_record_dir(base_dir: str, filename: str, attempt: int) -> str:
    sanitized = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    record_key = f"{sanitized}-{hashlib.sha1(filename.encode()).hexdigest()[:10]}"
    return os.path.join(base_dir, record_key, f"attempt-{attempt}")


def merge_attempt_records(attempt_dir: str, merged_path: str) -> None:
    capture_mod.merge_attempt(Path(attempt_dir), Path(merged_path))


class MilesStore:
    """SQLiteMetricHistoryStore: the schema, write_run and the baseline query."""

    def __init__(self, path: str):
        self.conn = sqlite3.connect(path)
        self.conn.executescript(SCHEMA_SQL)
        self.conn.commit()

    def write_run(
        self, identity: tuple[str, str, str], commit: str, created_at: str, trusted: bool,
        values: list[tuple[str, str, str, int, float]],
    ) -> str:
        run_id = uuid.uuid4().hex
        with self.conn:
            self.conn.execute(
                "INSERT INTO runs (run_id, test_path, backend, suite, commit_sha, pr_number, "
                "github_run_id, github_run_attempt, event_name, ref, created_at, trusted) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, *identity, commit, None, None, None, "schedule", "refs/heads/main",
                 created_at, 1 if trusted else 0),
            )
            self.conn.executemany(
                "INSERT INTO metric_values (run_id, metric_key, steps_key, constraint_key, step, "
                "value) VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, *v) for v in values],
            )
        return run_id

    def recent_trusted_values(self, identity: tuple[str, str, str], coord: tuple[str, str, str, int],
                              limit: int) -> list[float]:
        rows = self.conn.execute(BASELINE_SQL, (*identity, *coord, limit)).fetchall()
        return [row[0] for row in rows]

    def mark_untrusted(self, *, run_id: str | None = None, github_run_id: int | None = None,
                       commit_sha: str | None = None) -> int:
        given = {k: v for k, v in (("run_id", run_id), ("github_run_id", github_run_id),
                                   ("commit_sha", commit_sha)) if v is not None}
        if len(given) != 1:
            raise ValueError(f"mark_untrusted takes exactly one key, got {sorted(given)}")
        (column, value), = given.items()
        with self.conn:
            cur = self.conn.execute(
                f"UPDATE runs SET trusted = 0 WHERE {column} = ? AND trusted = 1", (value,))
            return cur.rowcount

    def close(self) -> None:
        self.conn.close()


# -- the executing stage (#2701-#2703) -------------------------------------------------------
ARCH_ORDER = ("hopper", "blackwell")  # auto-dispatch preference
STAGES: dict[str, tuple[str, int]] = {  # stage -> (arch, GPUs)
    "stage-b-2-gpu-h200": ("hopper", 2),
    "stage-c-8-gpu-h100": ("hopper", 8),
    "stage-c-8-gpu-h200": ("hopper", 8),
    "stage-c-4-gpu-h200": ("hopper", 4),
    "stage-c-2-gpu-h200": ("hopper", 2),
    "stage-c-8-gpu-b200": ("blackwell", 8),
}


def stage_for(home: str, arch: str) -> str | None:
    """target_stage: the home stage on its own arch, else the narrowest stage of `arch`
    with at least the home stage's GPUs (ties by name); None when none is wide enough."""
    if STAGES[home][0] == arch:
        return home
    wide = [s for s, (a, n) in STAGES.items() if a == arch and n >= STAGES[home][1]]
    return min(wide, key=lambda s: (STAGES[s][1], s), default=None)


def executing_stages(home: str, hardware: list[str], *, requested: frozenset[str] = frozenset(),
                     absorb: bool = False) -> set[str]:
    """dispatch_targets: the stages that run a CUDA registration. Nothing requested: once,
    on the first supported arch (its home, by the home-stage invariant); a requested arch
    that is not home's is reached only with `absorb` (an explicit run-on-* label)."""
    arches = set(hardware) & requested if requested else {
        next(a for a in ARCH_ORDER if a in hardware)}
    out = set()
    for arch in arches:
        if STAGES[home][0] == arch:
            out.add(home)
        elif absorb and (dest := stage_for(home, arch)) is not None:
            out.add(dest)
    return out


def run_identity(test_path: str, executing_suite: str) -> tuple[str, str, str]:
    """evaluate_gate's identity since #2702: the suite is the stage that ran."""
    return (test_path, "cuda", executing_suite)


def parse_merged_record(path: str) -> dict[str, list]:
    markers = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    by_metric: dict[str, list] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                by_metric[rec["metric"]] = [
                    [p[0], markers.get(p[1], p[1]) if isinstance(p[1], str) else p[1]]
                    for p in rec["series"]
                ]
    return by_metric


def select(series: list, steps: str) -> list[tuple[int, float]] | str:
    """(coordinate step, value) pairs, or the SelectionError text."""
    points = [(p[0] if isinstance(p[0], int) else None, float(p[1])) for p in series
              if len(p) >= 2 and not isinstance(p[1], bool) and isinstance(p[1], (int, float))]
    if not points:
        return "series has no numeric point"
    if steps == "last":
        step, value = points[-1]
        return f"last: non-finite value at step {step}" if not math.isfinite(value) else [(-1, value)]
    out, seen = [], set()
    for step, value in points:
        if step is None:
            return "all: a numeric point carries no step index"
        if step in seen:
            return f"all: duplicate step {step} in series"
        if not math.isfinite(value):
            return f"all: non-finite value {value!r} at step {step}"
        seen.add(step)
        out.append((step, value))
    return out


def evaluate(store: MilesStore, identity: tuple[str, str, str], record: str,
             history_limit: int = 20, declared: list[str] | None = None
             ) -> dict[str, dict[int | None, str]]:
    """metric -> {coordinate step: "pass" | "fail" | "inactive" | "error"} for every
    declared spec (`register_ci_gate(metric_key=M)`, GATE_DEFAULTS filling steps and
    constraint; default: all seven)."""
    by_metric = parse_merged_record(record)
    out: dict[str, dict[int | None, str]] = {}
    for metric in declared if declared is not None else GATE_DEFAULTS:
        spec = GATE_DEFAULTS[metric]
        c = spec["constraint"]
        series = by_metric.get(metric)
        picked = select(series, spec["steps"]) if series is not None else "missing"
        if isinstance(picked, str):
            out[metric] = {None: "error"}
            continue
        statuses: dict[int | None, str] = {}
        for step, value in picked:
            coord = (metric, canonical_key(spec["steps"]), canonical_key(c), step)
            trusted = store.recent_trusted_values(identity, coord, history_limit)
            if not trusted:
                statuses[step] = "inactive"
                continue
            ref = sum(trusted) / len(trusted)
            hi = ref + max(c.get("rel_up", 0.0) * abs(ref), c.get("abs_floor_up", 0.0))
            lo = ref - max(c.get("rel_down", 0.0) * abs(ref), c.get("abs_floor_down", 0.0))
            statuses[step] = "pass" if lo <= value <= hi else "fail"
        out[metric] = statuses
    return out


def trusted(verdict: dict[str, dict[int | None, str]]) -> bool:
    return all(s in ("pass", "inactive") for per in verdict.values() for s in per.values())


def values_to_write(record: str, verdict: dict[str, dict[int | None, str]]
                    ) -> list[tuple[str, str, str, int, float]]:
    """run_gate_hook: one row per coordinate whose selection succeeded."""
    by_metric = parse_merged_record(record)
    rows = []
    for metric, per in verdict.items():
        spec = GATE_DEFAULTS[metric]
        if None in per:
            continue
        picked = select(by_metric[metric], spec["steps"])
        assert not isinstance(picked, str)
        for step, value in picked:
            rows.append((metric, canonical_key(spec["steps"]), canonical_key(spec["constraint"]),
                         step, value))
    return rows


def copy_to_postgres(miles_db: str, pg_url: str) -> None:
    """miles' SQLite store, as its production PostgreSQL (Neon) holds it: the same tables,
    `trusted` a BOOLEAN."""
    import psycopg

    with sqlite3.connect(miles_db) as src, psycopg.connect(pg_url, autocommit=True) as dst:
        for stmt in PG_SCHEMA_SQL:
            dst.execute(stmt)
        for row in src.execute("SELECT run_id, test_path, backend, suite, commit_sha, "
                               "created_at, trusted FROM runs"):
            dst.execute("INSERT INTO runs (run_id, test_path, backend, suite, commit_sha, "
                        "created_at, trusted) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (*row[:6], bool(row[6])))
        with dst.cursor() as cur:
            cur.executemany("INSERT INTO metric_values VALUES (%s, %s, %s, %s, %s, %s)",
                            src.execute("SELECT * FROM metric_values").fetchall())
