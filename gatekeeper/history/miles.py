"""miles' metric-history gate, seen from gatekeeper: its run identity and its database.

Mirrors radixark/miles at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:
- identity `(test_path, backend, suite)` (tests/ci/metric_history/gate.py); our series
  key is canonical JSON of `config.test_path`, `config.backend`, `config.suite`;
- the harness writes each attempt's records under
  `<MILES_CI_GATE_RECORD_DIR>/<sanitized test path>-<sha1(test path)[:10]>/attempt-<n>/`
  and merges them into `attempt-<n>.merged.jsonl` (tests/ci/ci_utils.py), so the test
  path is recoverable from a record's path, and the suite from the test file's
  `register_cuda_ci(suite=...)` (the gate hook only runs for CUDA tests) where the test
  cannot have run on another stage (see `identity_from_path`: since miles #2702,
  fa787d5958a9, the suite is the executing stage);
- its store: `runs(run_id, test_path, backend, suite, commit_sha, ..., created_at,
  trusted)` and `metric_values(run_id, metric_key, steps_key, constraint_key, step,
  value)`, the same columns on SQLite and PostgreSQL/Neon
  (tests/ci/metric_history/storage/{sqlite,neon}_store.py).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import numpy as np

from gatekeeper.dburl import HISTORY_BOUNDS, KEEPALIVE, connect_postgres
from gatekeeper.errors import ConfigError, StateError, one_line, quote
from gatekeeper.history import is_postgres
from gatekeeper.history.base import CoordKey, Points, RunRecord, check_record, redact
from gatekeeper.history.keys import canonical
from gatekeeper.history.sql import SqlStore

SERIES_KEYS = ("config.test_path", "config.backend", "config.suite")
_KEY_DIR = re.compile(r"^(?P<name>.+)-(?P<sha>[0-9a-f]{10})$")
_ATTEMPT = re.compile(r"^attempt-\d+(\.merged\.jsonl)?$")
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist"}
_RUN_COLUMNS = ("run_id", "test_path", "backend", "suite", "commit_sha", "created_at", "trusted")
_EVERY_RUN = 1 << 62  # `runs()` limit that lists them all
_VALUE_COLUMNS = ("run_id", "metric_key", "steps_key", "constraint_key", "step", "value")


def series_of(test_path: str, backend: str, suite: str) -> str:
    """The series text of a miles identity, as `series_identity` builds it from a run."""
    return canonical(dict(zip(SERIES_KEYS, (test_path, backend, suite), strict=True)))


def record_dir_name(test_path: str) -> str:
    """miles' per-test record directory name (ci_utils._attempt_record_dir)."""
    sanitized = re.sub(r"[^A-Za-z0-9._-]", "_", test_path)
    return f"{sanitized}-{hashlib.sha1(test_path.encode()).hexdigest()[:10]}"


def identity_from_path(source: str, root: str | None = None) -> dict[str, str] | None:
    """`{test_path, backend, suite}` of a record the miles harness wrote, or None
    when the path is not shaped like one. The test file is found under `root` (the
    repository the harness runs in, default: the working directory) by its record directory
    name, which ends in a hash of the path, so a match is exact.

    `suite` is the stage the run executed on (miles #2702), which the record does not
    carry. It is the registered home stage only where the test cannot run elsewhere: its
    `register_cuda_ci` names no `hardware` (before #2701 nothing dispatched) or one arch
    (dispatch keeps such a test at home). A test listing several arches may have run on
    another generation's stage, so `suite` is left out and the caller must be told the
    stage (`--config suite=STAGE`, `run_suite.py --suite`'s value): a guessed home stage
    would file Blackwell numbers under the Hopper series."""
    path = os.path.abspath(source)
    if not _ATTEMPT.match(os.path.basename(path)):
        return None
    m = _KEY_DIR.match(os.path.basename(os.path.dirname(path)))
    if m is None:
        return None
    test_path = _find_test(m.group("name"), m.group("sha"), root or os.getcwd())
    if test_path is None:
        return None
    reg = cuda_registration(os.path.join(root or os.getcwd(), test_path))
    if reg is None:
        return None
    home, hardware = reg
    ident = {"test_path": test_path, "backend": "cuda"}
    if hardware is None or len(set(hardware)) == 1:
        ident["suite"] = home
    return ident


def _find_test(sanitized: str, sha: str, root: str) -> str | None:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            if not name.endswith(".py"):  # miles' CI registers test files only
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if record_dir_name(rel) == f"{sanitized}-{sha}":
                return rel
    return None


def cuda_registration(test_file: str) -> tuple[str, list[str] | None] | None:
    """`(suite, hardware)` literals of the file's one top-level `register_cuda_ci(...)`
    call (`hardware` None when the call has none); None without exactly one such call."""
    try:
        with open(test_file, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=test_file)
    except (OSError, SyntaxError, ValueError):
        return None
    found: list[tuple[str, list[str] | None]] = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        if call.func.id != "register_cuda_ci":
            continue
        kws = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        suite = kws.get("suite")
        if not isinstance(suite, ast.Constant):
            return None
        try:
            hw = ast.literal_eval(kws["hardware"]) if "hardware" in kws else None
        except ValueError:
            return None
        arches = [str(a) for a in hw] if isinstance(hw, (list, tuple)) else None
        found.append((str(suite.value), arches))
    return found[0] if len(found) == 1 else None


def declared_gates(test_file: str) -> list[tuple[str, dict[str, Any]]]:
    """`(metric_key, written)` of each top-level `register_ci_gate(...)` call, as miles'
    parse_ci_gate_specs finds them (tests/ci/metric_history/register.py): `written` holds
    the `steps` / `constraint` literals the call gives (miles fills the rest from
    GATE_DEFAULTS). A file that declares none gates nothing, as in miles."""
    with open(test_file, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=test_file)
    out: list[tuple[str, dict[str, Any]]] = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        if call.func.id != "register_ci_gate":
            continue
        kws = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        try:
            metric = ast.literal_eval(kws["metric_key"])
            written: dict[str, Any] = {
                k: ast.literal_eval(kws[k]) for k in ("steps", "constraint") if k in kws
            }
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"{test_file}:{call.lineno}: register_ci_gate needs literal metric_key, steps "
                f"and constraint ({type(exc).__name__}); miles refuses it too"
            ) from None
        out.append((str(metric), written))
    return out


@dataclass(frozen=True)
class ImportResult:
    runs: int
    values: int
    skipped: int  # already in the store (import is idempotent by run id)
    trusted: int
    revoked: tuple[str, ...] = ()  # untrusted in miles since an earlier import: now here too
    kept_untrusted: tuple[str, ...] = ()  # revoked here, still trusted in miles: stay revoked


def _connect(url: str) -> tuple[Any, str]:
    """A read-only DB-API connection to a miles store and its placeholder."""
    if is_postgres(url):
        # reads only: no bound on the time between them (a large store's rows are
        # converted between fetches), only on each statement and on waiting for a lock
        bounds = {k: HISTORY_BOUNDS[k] for k in ("statement_timeout", "lock_timeout")}
        conn = connect_postgres(url, "miles store", autocommit=False, bounds=bounds, **KEEPALIVE)
        return conn, "%s"
    path = url
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite://").removeprefix("sqlite:")
    if not os.path.isfile(path):
        raise StateError(f"miles store {path}: no such file")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True), "?"


def _check_columns(cur: Any, url: str, postgres: bool) -> None:
    for table, want in (("runs", _RUN_COLUMNS), ("metric_values", _VALUE_COLUMNS)):
        if postgres:
            cur.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s",
                (table,),
            )
            have = {str(r[0]) for r in cur.fetchall()}
        else:
            have = {str(r[1]) for r in cur.execute(f"PRAGMA table_info({table})").fetchall()}
        missing = [c for c in want if c not in have]
        if missing:
            what = "has no table" if not have else f"table {table} lacks {', '.join(missing)}"
            raise StateError(
                f"{redact(url)} is not a miles metric-history database: {what}"
                + (f" {table}" if not have else "")
            )


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")
    return str(value)


def read_runs(url: str) -> list[RunRecord]:
    """Every run of a miles store as gatekeeper records, oldest first (miles orders its
    baseline by created_at). Values stream in run order and become arrays run by run, so
    a large history never sits in memory as Python tuples."""
    conn, p = _connect(url)
    postgres = p == "%s"
    try:
        cur = conn.cursor()
        _check_columns(cur, url, postgres)
        cur.execute(
            "SELECT run_id, test_path, backend, suite, commit_sha, created_at, trusted FROM runs"
        )
        runs = sorted(cur.fetchall(), key=lambda r: (_iso(r[5]), str(r[0])))
        # a server-side cursor on PostgreSQL: psycopg would otherwise fetch every row
        values = conn.cursor(name="gk_import") if postgres else conn.cursor()
        values.execute(
            "SELECT run_id, metric_key, steps_key, constraint_key, step, value "
            "FROM metric_values ORDER BY run_id"
        )
        points = dict(_points_by_run(values, url))
    finally:
        conn.close()
    return [
        RunRecord(
            str(run_id),
            series_of(str(test_path), str(backend), str(suite)),
            trusted == 1,  # miles reads `trusted = 1` (SQLite) or a true BOOLEAN: 2 is not
            points.get(str(run_id), {}),
            str(commit) if commit is not None else None,
            _iso(created_at),
        )
        for run_id, test_path, backend, suite, commit, created_at, trusted in runs
    ]


def _points_by_run(rows: Any, url: str) -> Iterator[tuple[str, dict[CoordKey, Points]]]:
    """(run_id, its packed points) from value rows sorted by run_id."""
    current: str | None = None
    coords: dict[CoordKey, dict[int, float]] = {}
    for run_id, metric, sk, ck, step, value in rows:
        if not _whole(step) or not _number(value):
            raise StateError(
                f"miles store {redact(url)}: run {one_line(str(run_id))} holds step "
                f"{quote(step)} and value {quote(value)} at {quote(metric)}, not a whole "
                "step and a number (miles writes an INTEGER and a REAL); fix or delete "
                "the row and import again"
            )
        if str(run_id) != current:
            if current is not None:
                yield current, _packed(coords)
            current, coords = str(run_id), {}
        by_step = coords.setdefault((metric, sk, ck), {})
        if int(step) in by_step:
            # miles' baseline read would count such a row twice; we keep one value per
            # coordinate, so say so rather than pick one.
            raise StateError(
                f"miles store {redact(url)}: run {run_id} holds two values at {metric} "
                f"{sk} {ck} step {step}; delete one and import again"
            )
        by_step[int(step)] = float(value)
    if current is not None:
        yield current, _packed(coords)


def _whole(step: Any) -> bool:
    """An int step, or a float one that is whole (sqlite keeps what it was given)."""
    if isinstance(step, float):
        return step.is_integer()
    return isinstance(step, int) and not isinstance(step, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _packed(coords: dict[CoordKey, dict[int, float]]) -> dict[CoordKey, Points]:
    out = {}
    for key, by_step in coords.items():
        steps = np.array(sorted(by_step), dtype=np.int64)
        out[key] = (steps, np.array([by_step[int(s)] for s in steps], dtype=np.float64))
    return out


def import_runs(store: SqlStore, url: str) -> ImportResult:
    """Copy a miles store's runs into `store`, keeping run ids, trust, commit and order,
    and sync trust for runs imported before: trust is only ever revoked (miles'
    `mark_untrusted`, gatekeeper's `history mark-untrusted`; neither re-trusts), so a run
    is trusted here only while both stores trust it. A run miles untrusted since is
    revoked here; one revoked here but trusted in miles stays revoked (listed: the miles
    store is only read). A run older than one gatekeeper recorded in the same series is
    refused (newest-first order is insert order: import first)."""
    records = read_runs(url)
    for rec in records:
        check_record(rec)
    here = {r.run_id: r.trusted for r in store.runs(limit=_EVERY_RUN)}
    fresh = [r for r in records if r.run_id not in here]
    for rec in fresh:
        newest = store.newest(rec.series)
        if newest is not None and rec.created_at is not None and rec.created_at < newest:
            raise StateError(
                f"miles run {rec.run_id} ({rec.created_at}) is older than run(s) already in "
                f"{store.display} for series {rec.series} (newest {newest}); import into a "
                "store before recording that series there"
            )
    store.record_many(fresh)
    old = [r for r in records if r.run_id in here]
    revoked = tuple(r.run_id for r in old if here[r.run_id] and not r.trusted)
    for run_id in revoked:
        store.mark_untrusted(run_id=run_id)
    return ImportResult(
        runs=len(fresh),
        values=sum(r.n_values for r in fresh),
        skipped=len(old),
        trusted=sum(r.trusted for r in fresh),
        revoked=revoked,
        kept_untrusted=tuple(r.run_id for r in old if r.trusted and not here[r.run_id]),
    )
