"""The daemon's saved judging state is bounded by the rules' windows, not by the run's
length (issue 28), and its verdict is still `check`'s on the same data.

Each test follows a real JSONL file (and its `.meta.json` sidecar) written the way a
trainer writes them, with the daemon's own `RunWatcher` on a real SQLite state file and
the shipped policies, and compares with `check` (`session.judge_whole` on the whole file).
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

from gatekeeper.daemon.service import fingerprint
from gatekeeper.daemon.state import StateStore
from gatekeeper.daemon.watch import RunWatcher, Watched
from gatekeeper.model import Series
from gatekeeper.policy.loader import load_policies
from gatekeeper.session import JudgingSession, judge_whole
from gatekeeper.sources import open_live_source, open_source

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [str(ROOT / "policies" / "miles"), str(ROOT / "policies" / "rl-health.yaml")]
METRICS = (
    "train/ppo_kl",
    "train/pg_clipfrac",
    "train/grad_norm",
    "train/loss",
    "train/train_rollout_logprob_abs_diff",
)
# ci-consistency's keys but the period (num_steps_per_rollout): its `every` rules wait
CONFIG = {"lora_rank": 0, "multi_latent_attention": False, "use_rollout_routing_replay": False,
          "train_backend": "megatron", "start_rollout_id": 0}


def _append(
    path: Path, start: int, stop: int, bad: dict[tuple[str, int], float] | None = None
) -> None:
    """Rows of every metric at each step; `bad` (metric, step) -> the value there."""
    with open(path, "a") as fh:
        for step in range(start, stop):
            v = 1e-12 * (1 + step % 7)
            row = {m: (bad or {}).get((m, step), v) for m in METRICS}
            fh.write(json.dumps({"train/step": step, **row}) + "\n")


def _sidecar(path: Path, config: dict[str, Any]) -> None:
    meta = path.with_name(path.name[: -len(".jsonl")] + ".meta.json")
    meta.write_text(json.dumps({"name": "r", "config": config}))


def _watcher(tmp: Path, path: Path) -> RunWatcher:
    policies = load_policies(SHIPPED)
    watched = Watched(
        target="t", policies=policies, fingerprint=fingerprint(policies), tags=(),
        interval=1, debounce=1, channels=[], open_source=open_live_source,
    )
    store = StateStore(str(tmp / "state.db"))
    return RunWatcher(str(path), watched, store, record=store.load_runs().get(str(path)))


def _saved(tmp: Path) -> str:
    (state,) = sqlite3.connect(tmp / "state.db").execute("SELECT state FROM runs").fetchone()
    return str(state)


def _results(results: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return sorted((r["policy"], r["rule"], r["status"], r["message"]) for r in results)


def _check(path: Path) -> list[tuple[str, str, str, str]]:
    _, verdict = judge_whole(load_policies(SHIPPED), open_source(str(path)).read())
    return _results(verdict.to_dict()["results"])


def _end(path: Path) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")


def test_the_saved_state_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """history, isclose and a `steps: {every: config.k}` whose key the run lacks kept every
    point (229 KB at 1,000 steps, 19 MB at 100,000); now 300 and 3,000 steps save the same
    size within 1.2x, and the ended run's verdict is check's, a NaN and a violation in it."""
    path = tmp_path / "r.jsonl"
    _sidecar(path, CONFIG)
    watcher = _watcher(tmp_path, path)
    sizes = {}
    for start in range(0, 3000, 100):
        bad = {("train/ppo_kl", 1234): 5e-3, ("train/loss", 2345): float("nan")}
        _append(path, start, start + 100, bad)
        watcher.apply(watcher.fetch(), float(start))
        if start + 100 in (300, 3000):
            sizes[start + 100] = len(_saved(tmp_path))
    assert sizes[3000] <= 1.2 * sizes[300], sizes
    _end(path)
    watcher.apply(watcher.fetch(), 9999.0)
    assert watcher.verdict is not None and watcher.ended
    daemon = _results(watcher.verdict["results"])
    assert daemon == _check(path)
    statuses = {(p, r): s for p, r, s, _ in daemon}
    assert statuses[("miles-ci-consistency", "ppo-kl-rollout-start")] == "error"  # key unset
    assert statuses[("miles-history", "grad-norm")] == "skip"  # no baseline store
    assert statuses[("rl-health", "loss-finite")] == "error"  # the NaN at 2345
    assert statuses[("rl-health", "pg-clipfrac-high")] == "pass"


def test_a_period_learned_late_re_reads_the_run_and_judges_as_check(tmp_path: Path) -> None:
    """The period of ci-consistency's `every` rules comes in the sidecar after 500 steps:
    the points counted without it cannot be selected, so the run is read again from its
    start (once), and the verdict is check's: FAIL at the even step that violates (period
    2), not the odd one. Restarting on the saved state changes nothing."""
    path = tmp_path / "r.jsonl"
    _sidecar(path, CONFIG)
    bad = {("train/ppo_kl", 101): 1e-3, ("train/ppo_kl", 202): 1e-3}
    watcher = _watcher(tmp_path, path)
    for start in range(0, 500, 100):
        _append(path, start, start + 100, bad)
        watcher.apply(watcher.fetch(), float(start))
    assert watcher.status == "error"  # num_steps_per_rollout unset
    _sidecar(path, {**CONFIG, "num_steps_per_rollout": 2})
    _append(path, 500, 600)
    assert watcher.apply(watcher.fetch(), 600.0) == []  # nothing committed: re-read next
    assert watcher.points == 0 and watcher.cursor is None
    watcher.apply(watcher.fetch(), 601.0)
    assert watcher.points == 600 * len(METRICS)
    watcher.store.close()
    again = _watcher(tmp_path, path)  # a restart: the saved state, not a re-read
    assert again.session is not None and again.cursor is not None
    _append(path, 600, 700)
    _end(path)
    again.apply(again.fetch(), 700.0)
    assert again.verdict is not None
    daemon = _results(again.verdict["results"])
    assert daemon == _check(path)
    fail = [m for p, r, s, m in daemon if r == "ppo-kl-rollout-start" and s == "fail"]
    assert fail and "step 202" in fail[0], daemon
    assert os.path.getsize(tmp_path / "state.db") > 0


def test_a_period_the_config_changes_re_reads_the_run_and_judges_as_check(
    tmp_path: Path,
) -> None:
    """The sidecar says num_steps_per_rollout 2, then 3: points judged by the period 2
    are not those 3 selects, so the run is read again and judged by 3, as check judges the
    run with the config it ends with (the violation at step 202 is not selected by 3, the
    one at 303 is)."""
    path = tmp_path / "r.jsonl"
    _sidecar(path, {**CONFIG, "num_steps_per_rollout": 2})
    bad = {("train/ppo_kl", 202): 1e-3, ("train/ppo_kl", 303): 1e-3}
    watcher = _watcher(tmp_path, path)
    _append(path, 0, 400, bad)
    watcher.apply(watcher.fetch(), 1.0)
    assert watcher.status == "fail"
    _sidecar(path, {**CONFIG, "num_steps_per_rollout": 3})
    _append(path, 400, 410)
    assert watcher.apply(watcher.fetch(), 2.0) == [] and watcher.cursor is None
    _end(path)
    watcher.apply(watcher.fetch(), 3.0)
    assert watcher.verdict is not None
    daemon = _results(watcher.verdict["results"])
    assert daemon == _check(path)
    fail = [m for p, r, s, m in daemon if r == "ppo-kl-rollout-start" and s == "fail"]
    assert fail and "step 303" in fail[0], daemon


def test_a_metric_the_config_names_after_a_restart_re_reads_the_run(tmp_path: Path) -> None:
    """miles-metric-checker reads the metric the config's ci_metric_checker_key names;
    the sidecar names it only after a restart, its points (a NaN at step 50) having come
    before. The names fed were not saved, so the rules judged from the restart on and
    `key-finite` passed; now the run is read again and the verdict is check's."""
    path = tmp_path / "r.jsonl"
    _sidecar(path, CONFIG)

    def rows(start: int, stop: int) -> None:
        _append(path, start, stop)
        with open(path, "a") as fh:
            for step in range(start, stop):
                value = float("nan") if step == 50 else 0.9
                fh.write(json.dumps({"eval/step": step, "eval/gsm8k": value}) + "\n")

    rows(0, 100)
    watcher = _watcher(tmp_path, path)
    watcher.apply(watcher.fetch(), 1.0)
    watcher.store.close()
    again = _watcher(tmp_path, path)  # a restart: the saved state
    assert again.cursor is not None
    named = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": 0.5}
    _sidecar(path, {**CONFIG, **named})
    rows(100, 200)
    assert again.apply(again.fetch(), 2.0) == [] and again.cursor is None  # re-read next
    _end(path)
    again.apply(again.fetch(), 3.0)
    assert again.verdict is not None
    daemon = _results(again.verdict["results"])
    assert daemon == _check(path)
    finite = [(s, m) for p, r, s, m in daemon if r == "key-finite"]
    assert finite[0][0] == "error" and "step 50" in finite[0][1], finite


REDUCING = """\
version: 1
name: red
rules:
  - {id: top, metric: m, reduce: max, check: {min: 0.71}}
  - {id: low, metric: m, reduce: min, check: {min: 0.0}}
  - {id: end, metric: m, reduce: last, check: {max: 0.9}}
  - {id: mid, metric: m, steps: {from: 0, to: 40}, reduce: median, check: {max: 0.9}}
"""


def test_min_max_last_reductions_keep_one_value_and_judge_as_check(tmp_path: Path) -> None:
    """`reduce: max` over every eval (miles' gsm8k threshold) kept each value; min, max
    and last now keep their running value: the saved state does not grow, and the verdict
    poll by poll is check's on the same points, with and without a NaN among them."""
    (tmp_path / "red.yaml").write_text(REDUCING)
    policies = load_policies([str(tmp_path / "red.yaml")])
    for nan_at in (None, 70):
        path = tmp_path / f"r-{nan_at}.jsonl"
        points = [
            (s, float("nan") if s == nan_at else 0.5 + 0.4 * ((s * 37) % 11) / 11)
            for s in range(200)
        ]
        path.write_text("".join(json.dumps({"step": s, "m": v}) + "\n" for s, v in points))
        run = open_source(str(path)).read()
        session = JudgingSession(policies, live=True, bounded=True)
        sizes = []
        for start in range(0, 200, 10):
            chunk = points[start : start + 10]
            new = Series.from_lists("m", [s for s, _ in chunk], [v for _, v in chunk])
            session.feed({"m": new}, run)
            session.verdict(final=False)
            sizes.append(len(json.dumps(session.to_state())))
        assert sizes[-1] <= 1.2 * sizes[5], sizes  # the median's range ends at step 40
        got = session.verdict(final=True).to_dict()["results"]
        _, whole = judge_whole(policies, open_source(str(path)).read())  # check, fresh
        assert _results(got) == _results(whole.to_dict()["results"])
        statuses = {r["rule"]: r["status"] for r in got}
        if nan_at is None:
            assert statuses == {"top": "pass", "low": "pass", "end": "pass", "mid": "pass"}
        else:
            assert statuses == {"top": "error", "low": "error", "end": "error", "mid": "pass"}


def test_a_poll_writes_the_rule_rows_that_changed_and_the_store_matches_memory(
    tmp_path: Path,
) -> None:
    """A steady poll writes only the rule rows (and alert states) that differ from the
    committed ones; after every poll, a status change and a restart included, the store's
    rows are the watcher's."""
    path = tmp_path / "r.jsonl"
    _sidecar(path, CONFIG)
    watcher = _watcher(tmp_path, path)
    written: list[int] = []
    commit_poll = watcher.store.commit_poll

    def spy(c: Any) -> list[int]:
        written.append(len(c.rules))
        return commit_poll(c)

    watcher.store.commit_poll = spy  # type: ignore[method-assign]
    for start in range(0, 600, 50):
        _append(path, start, start + 50, {("train/loss", 420): float("nan")})
        watcher.apply(watcher.fetch(), float(start))
        rec = watcher.store.load_run(str(path))
        assert rec is not None and rec.rules == watcher.rules
    assert watcher.rules[("miles-ci-capture", "ppo-kl-finite")].status == "pass"
    assert written[0] == len(watcher.rules) and 0 < min(written[1:]) < len(watcher.rules) / 2
    loss = watcher.rules[("rl-health", "loss-finite")]  # changed by the NaN at step 420
    assert (loss.status, loss.since) == ("error", 400.0)
    restarted = _watcher(tmp_path, path)
    assert restarted.rules == watcher.rules
    assert restarted.verdict == json.loads(json.dumps(watcher.verdict))


def test_a_watcher_resumed_from_its_record_keeps_no_more_than_one_that_read_the_run(
    tmp_path: Path,
) -> None:
    # after a restart each run's watcher is made from its stored record (its state as
    # parsed data, its verdict): it must not keep the record once resumed (~125 KB a run
    # at the shipped policies stayed with every watcher, for the daemon's life)
    policies = load_policies(SHIPPED)
    watched = Watched(
        target="t", policies=policies, fingerprint=fingerprint(policies), tags=(),
        interval=1, debounce=1, channels=[], open_source=open_live_source,
    )  # fmt: skip
    path = tmp_path / "run.jsonl"
    _sidecar(path, CONFIG)
    _append(path, 0, 300)
    store = StateStore(str(tmp_path / "state.db"))
    first = RunWatcher(str(path), watched, store)
    first.apply(first.fetch(), 1.0)
    _append(path, 300, 310)
    del first
    retained = {}
    for how in ("resumed from its record", "read from its start"):
        gc.collect()
        tracemalloc.start()  # the record is read inside: what the watcher keeps counts
        record = store.load_runs()[str(path)] if how == "resumed from its record" else None
        watcher = RunWatcher(str(path), watched, store, record)
        del record
        watcher.apply(watcher.fetch(), 2.0)
        gc.collect()
        retained[how] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert watcher.points == 310 * len(METRICS)  # the run's, however it was read
        del watcher
    assert retained["resumed from its record"] < 1.15 * retained["read from its start"], retained
