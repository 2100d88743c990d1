"""gatekeeper's history gate against miles' own, case by case (issue 27's Done-when:
"history agrees on all cases incl. scope, revocation and the executing stage").

Each case is a sequence of trusted-baseline runs and one judged run, all CI records as
miles' capture backend and harness merge write them (tests/miles/capture.py), plus the
test file's register_ci_gate declarations, an optional revocation and the stage the run
executed on. miles' side is tests/history/miles_ref.py, the mirror of radixark/miles
31f1ca961a94cb860cec3b2dea34ec332bfa8f76 (evaluate_gate, run_gate_hook, mark_untrusted)
with the executing-stage identity of PRs #2701-#2703 (fa787d5958a9). gatekeeper's side is
the real CLI, `gatekeeper check RECORD -p policies/miles/history.yaml --history DB
--record` (and `gatekeeper history import` where the baseline comes from miles' store),
run in-process through `gatekeeper.cli.main.main` for speed, in the miles checkout.

Two things must agree for every case:
(a) the verdict: each rule's status (miles' per-coordinate statuses folded as
    test_miles_pack.rule_status; an undeclared metric is a skip) and whether the judged
    run is trusted;
(b) what is recorded trusted afterwards: per metric and step, the trusted values the next
    run's baseline reads, in miles' store and in gatekeeper's.
The test prints "history: N/31 agree" (the earlier evaluation's 27 cases, plus an Inf
value, a drift inside the band, the mean over runs and the 20-run window) and each disagreement.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.history import open_store
from gatekeeper.history.miles import series_of
from tests.fuzz.harness import run_cli
from tests.helpers import gatekeeper
from tests.history import miles_ref
from tests.history.test_miles_pack import PACK, RULE_OF, TEST_PATH, rule_status
from tests.miles.capture import VARIANTS, CiCapture, Variant, capture_run, merge_attempt

Edit = Callable[[str, dict[str, Any]], None]
ALL = tuple(RULE_OF)
HOME = "stage-c-8-gpu-h200"
B200 = "stage-c-8-gpu-b200"
ROLLOUTS = 8  # steps 0..7 with one step per rollout


@dataclass(frozen=True)
class Run:
    """One captured run: a variant's healthy log, changed by `edits`; `extra` adds a third
    logging process's (step, grad_norm) points (step None: no step key)."""

    variant: Variant = VARIANTS[0]
    edits: tuple[Edit, ...] = ()
    extra: tuple[tuple[int | None, float], ...] = ()
    jitter: float = 0.0  # run-to-run noise: every value scaled by (1 + jitter)


@dataclass(frozen=True)
class Case:
    name: str
    family: str  # cases of one family share their baseline (built once, copied per case)
    baseline: tuple[Run, ...]
    judged: Run
    declared: tuple[str, ...] = ALL
    imported: bool = False  # baseline written by miles' gate hook, then `history import`
    revoke: tuple[int, ...] = ()  # baseline runs miles marks untrusted, then a re-import
    revoke_by: str = "run_id"  # mark_untrusted's key: run_id or commit_sha
    stage: str | None = None  # executing stage of a dispatched run (--config suite=)

    def __str__(self) -> str:
        return self.name


def scale(metric: str, factor: float, step: int | None = None) -> Edit:
    def edit(_: str, m: dict[str, Any]) -> None:
        key = "train/step" if metric.startswith("train/") else "rollout/step"
        if metric in m and (step is None or m.get(key) == step):
            m[metric] = m[metric] * factor

    return edit


def put(metric: str, value: float, step: int | None = None) -> Edit:
    def edit(_: str, m: dict[str, Any]) -> None:
        key = "train/step" if metric.startswith("train/") else "rollout/step"
        if metric in m and (step is None or m.get(key) == step):
            m[metric] = value

    return edit


def drop(metric: str) -> Edit:
    return lambda _, m: m.pop(metric, None)


KL, GRAD, REWARD = "train/ppo_kl", "train/grad_norm", "rollout/raw_reward"
TITO1 = "rollout/tito_session_mismatch_rate/v1/assistant_text"
TITO2 = "rollout/tito_session_mismatch_rate/v2/assistant_text"
THREE = tuple(Run(jitter=j) for j in (0.0, 0.02, -0.015))
SCOPE = (KL, TITO1)


def variant_cases() -> list[Case]:
    return [Case(f"healthy {v.name}", f"v-{v.name}",
                 tuple(Run(v, jitter=j) for j in (0.0, 0.02, -0.015)), Run(v, jitter=0.01))
            for v in VARIANTS]


CASES: tuple[Case, ...] = (
    Case("cold start", "cold", (), Run()),
    *variant_cases(),
    Case("ppo_kl 0.05 at step 0", "three", THREE, Run(edits=(put(KL, 0.05, 0),))),
    Case("ppo_kl 0.05 at step 7", "three", THREE, Run(edits=(put(KL, 0.05, 7),))),
    Case("NaN grad_norm at step 3", "three", THREE, Run(edits=(put(GRAD, float("nan"), 3),))),
    Case("Inf reward at step 2", "three", THREE, Run(edits=(put(REWARD, float("inf"), 2),))),
    Case("missing train_rollout_kl", "three", THREE,
         Run(edits=(drop("train/train_rollout_kl"),))),
    Case("3x grad_norm drift", "three", THREE, Run(edits=(scale(GRAD, 3.0),))),
    Case("1.3x grad_norm (inside the band)", "three", THREE, Run(edits=(scale(GRAD, 1.3),))),
    Case("raw_reward 30% down", "three", THREE, Run(edits=(scale(REWARD, 0.7),))),
    Case("duplicate grad_norm step", "three", THREE, Run(extra=((2, 0.21),))),
    Case("grad_norm without a step", "three", THREE, Run(extra=((None, 0.21),))),
    Case("tito v1 spike at the last step", "three", THREE, Run(edits=(put(TITO1, 0.5, 7),))),
    Case("tito v1 NaN before the last step", "three", THREE,
         Run(edits=(put(TITO1, float("nan"), 3),))),
    Case("healthy after an untrusted drift", "drifted",
         (*THREE, Run(edits=(scale(GRAD, 3.0),))), Run(jitter=0.01)),
    # ref is the mean of the trusted runs (2x passes against the newest, 1.45x, alone)
    Case("2x grad_norm after a 1.45x nightly", "spread",
         (*THREE[:2], Run(edits=(scale(GRAD, 1.45),))), Run(edits=(scale(GRAD, 2.0),))),
    # only the newest 20 trusted runs count: the 4x cold start has aged out
    Case("1.6x grad_norm, a 4x run 21 runs back", "aged",
         (Run(edits=(scale(GRAD, 4.0),)), *(Run(jitter=0.001 * k) for k in range(20))),
         Run(edits=(scale(GRAD, 1.6),))),
    Case("scope: undeclared 3x grad_norm", "scope", THREE, Run(edits=(scale(GRAD, 3.0),)),
         declared=SCOPE),
    Case("scope: declared tito v1 missing", "scope", THREE, Run(edits=(drop(TITO1),)),
         declared=SCOPE),
    Case("scope: nothing declared, 3x drift", "none", THREE, Run(edits=(scale(GRAD, 3.0),)),
         declared=()),
    Case("imported: healthy", "imported", THREE, Run(jitter=0.01), imported=True),
    Case("imported: 3x grad_norm drift", "imported", THREE, Run(edits=(scale(GRAD, 3.0),)),
         imported=True),
    Case("revoked all in miles: cold start", "revoked", THREE, Run(edits=(scale(GRAD, 3.0),)),
         imported=True, revoke=(0, 1, 2)),
    Case("revoked one (by commit) in miles: still drift", "revoked", THREE,
         Run(edits=(scale(GRAD, 3.0),)), imported=True, revoke=(1,), revoke_by="commit_sha"),
    # a dispatchable test with nightlies on its home stage and on B200 (grad_norm 3x there)
    Case("stage: healthy B200 run, B200 series", "stage", THREE,
         Run(edits=(scale(GRAD, 3.0),)), declared=(GRAD,), imported=True, stage=B200),
    Case("stage: the same numbers at home: drift", "stage", THREE,
         Run(edits=(scale(GRAD, 3.0),)), declared=(GRAD,), imported=True, stage=HOME),
)


def capture(base: Path, run: Run) -> str:
    """The run as miles' CI writes it: per-process files merged by the harness."""
    attempt = Path(miles_ref.attempt_record_dir(str(base), TEST_PATH, 1))

    def edit(process: str, m: dict[str, Any]) -> None:
        if process == "rollout":  # the TITO rates miles logs from its session server
            m.update({TITO1: 0.01 + 0.001 * m["rollout/step"], TITO2: 0.02})
        for key in list(m):
            if not key.endswith("/step") and isinstance(m[key], float):
                m[key] = m[key] * (1 + run.jitter)
        for e in run.edits:
            e(process, m)

    capture_run(attempt, run.variant, ROLLOUTS, edit)
    if run.extra:
        third = CiCapture(attempt, 1203)
        for step, value in run.extra:
            third.log({GRAD: value} if step is None else {GRAD: value, "train/step": step},
                      "train/step")
    merged = Path(f"{attempt}.merged.jsonl")
    merge_attempt(attempt, merged)
    return str(merged)


def write_checkout(root: Path, case: Case) -> Path:
    """The miles test file: its home stage, hardware (a dispatchable test for the stage
    cases) and register_ci_gate declarations."""
    test = root / "miles" / TEST_PATH
    test.parent.mkdir(parents=True, exist_ok=True)
    hw = ", hardware=['hopper', 'blackwell']" if case.stage else ""
    test.write_text(
        "from tests.ci.ci_register import register_cuda_ci\n"
        "from tests.ci.metric_history.register import register_ci_gate\n"
        f'register_cuda_ci(est_time=300, suite="{HOME}"{hw})\n'
        + "".join(f'register_ci_gate(metric_key="{m}")\n' for m in case.declared)
    )
    return root / "miles"


def gk(checkout: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> str:
    monkeypatch.chdir(checkout)
    rc, out, err, _ = run_cli(list(argv))
    assert rc == 0, f"gatekeeper {' '.join(argv)}: exit {rc}\n{out}{err}"
    return out


def identity(case: Case) -> tuple[str, str, str]:
    return miles_ref.run_identity(TEST_PATH, case.stage or HOME)


def suite_flag(case: Case) -> tuple[str, ...]:
    return ("--config", f"suite={case.stage}") if case.stage else ()


def judge_miles(miles_db: str, case: Case, record: str, day: int) -> dict:
    """miles' gate hook: evaluate, then write the run with its trust and its values."""
    miles = miles_ref.MilesStore(miles_db)
    mv = miles_ref.evaluate(miles, identity(case), record, declared=list(case.declared))
    miles.write_run(identity(case), f"c{day}", f"2026-05-{day:02d}T03:00:00.000000+00:00",
                    miles_ref.trusted(mv), miles_ref.values_to_write(record, mv))
    miles.close()
    return mv


def judge_gk(checkout: Path, mp: pytest.MonkeyPatch, case: Case, record: str, url: str,
             run_id: str, out: Path) -> dict:
    gk(checkout, mp, "check", record, "-p", PACK, "--history", url, "--record", "--run-id",
       run_id, *suite_flag(case), "--json", str(out))
    return json.loads(out.read_text())


def build_baseline(root: Path, case: Case, mp: pytest.MonkeyPatch) -> tuple[str, str]:
    """The family's stores: miles' and gatekeeper's, after the baseline runs. Recorded by
    both gates run by run, or (imported) written by miles' hook and imported. The stage
    family also holds the other stage's series (grad_norm 3x on Blackwell)."""
    checkout = write_checkout(root, case)
    miles_db, url = str(root / "miles.db"), str(root / "gk.db")
    miles_ref.MilesStore(miles_db).close()
    stages = (HOME, B200) if case.stage else (None,)
    for i, run in enumerate(case.baseline, 1):
        for stage in stages:
            at = Case(case.name, case.family, (), run, case.declared, stage=stage)
            on_b200 = Run(run.variant, (*run.edits, scale(GRAD, 3.0)), jitter=run.jitter)
            record = capture(root / f"base{i}-{stage}", on_b200 if stage == B200 else run)
            judge_miles(miles_db, at, record, i + (10 if stage == B200 else 0))
            if not case.imported:
                judge_gk(checkout, mp, at, record, url, f"b{i}", root / f"b{i}.json")
    if case.imported:
        gk(checkout, mp, "history", "import", miles_db, "--history", url)
    return miles_db, url


def miles_trusted(miles_db: str, ident: tuple[str, str, str], metric: str) -> dict:
    """Per step, the values miles' baseline query (newest 20 trusted) reads next."""
    spec = miles_ref.GATE_DEFAULTS[metric]
    keys = (metric, miles_ref.canonical_key(spec["steps"]),
            miles_ref.canonical_key(spec["constraint"]))
    miles = miles_ref.MilesStore(miles_db)
    steps = [r[0] for r in miles.conn.execute(
        "SELECT DISTINCT step FROM metric_values WHERE metric_key = ?", (metric,))]
    out = {s: sorted(round(v, 12) for v in miles.recent_trusted_values(ident, (*keys, s), 20))
           for s in steps}
    miles.close()
    return {s: v for s, v in out.items() if v}


def gk_trusted(url: str, ident: tuple[str, str, str], metric: str) -> dict:
    spec = miles_ref.GATE_DEFAULTS[metric]
    with open_store(url) as store:
        got = store.baseline(series_of(*ident), metric, miles_ref.canonical_key(spec["steps"]),
                             miles_ref.canonical_key(spec["constraint"]))
    return {s: sorted(round(x, 12) for x in v) for s, v in got.items()}


@dataclass
class Row:
    case: Case
    miles: dict[str, str]
    gk: dict[str, str]
    miles_trusted: bool
    gk_trusted: bool
    recorded_diff: list[str]

    @property
    def agrees(self) -> bool:
        return (self.miles == self.gk and self.miles_trusted == self.gk_trusted
                and not self.recorded_diff)


def judge_case(case: Case, family: Path, root: Path, mp: pytest.MonkeyPatch) -> Row:
    shutil.copytree(family, root)
    checkout = root / "miles"
    miles_db, url = str(root / "miles.db"), str(root / "gk.db")
    if case.revoke:
        miles = miles_ref.MilesStore(miles_db)
        ids = [r[0] for r in miles.conn.execute("SELECT run_id FROM runs ORDER BY created_at")]
        for k in case.revoke:  # judge_miles wrote baseline run k with commit c{k + 1}
            key = ids[k] if case.revoke_by == "run_id" else f"c{k + 1}"
            assert miles.mark_untrusted(**{case.revoke_by: key}) == 1
        miles.close()
        out = gk(checkout, mp, "history", "import", miles_db, "--history", url)
        assert f"{len(case.revoke)} run(s) now untrusted here too" in out, out
    record = capture(root / "judged", case.judged)
    mv = judge_miles(miles_db, case, record, 28)
    verdict = judge_gk(checkout, mp, case, record, url, "judged", root / "v.json")
    want = {r: "skip" for r in RULE_OF.values()}
    want.update({RULE_OF[m]: rule_status(s) for m, s in mv.items()})
    got = {r["rule"]: r["status"] for r in verdict["results"]}
    diff = []
    for metric in ALL:
        m, g = (miles_trusted(miles_db, identity(case), metric),
                gk_trusted(url, identity(case), metric))
        if m != g:
            diff.append(f"{metric}: miles {m} gatekeeper {g}")
    return Row(case, want, got, miles_ref.trusted(mv),
               verdict["run"]["history"]["trusted"], diff)


def plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment tests.helpers.gatekeeper gives a child: no GITHUB_* (annotations),
    no store named by the environment."""
    for key in [k for k in os.environ if k.startswith("GITHUB_")] + ["GATEKEEPER_HISTORY"]:
        monkeypatch.delenv(key, raising=False)


def test_history_agrees_with_miles_case_by_case(tmp_path, monkeypatch, capsys):
    plain_env(monkeypatch)
    families: dict[str, Path] = {}
    rows = []
    for k, case in enumerate(CASES):
        if case.family not in families:
            families[case.family] = tmp_path / f"family-{case.family}"
            build_baseline(families[case.family], case, monkeypatch)
        rows.append(judge_case(case, families[case.family], tmp_path / f"case{k}", monkeypatch))
    agree = sum(r.agrees for r in rows)
    with capsys.disabled():
        print(f"\nhistory: {agree}/{len(rows)} agree")
        for r in rows:
            fails = sorted(k for k, v in r.gk.items() if v in ("fail", "error"))
            print(f"  {'ok ' if r.agrees else 'XX '} {r.case.name:48} trusted "
                  f"miles={r.miles_trusted!s:5} gk={r.gk_trusted!s:5} flagged={fails}")
            if not r.agrees:
                print(f"      miles {r.miles}\n      gk    {r.gk}")
                for d in r.recorded_diff:
                    print(f"      recorded: {d}")
    assert len(rows) == len(CASES) == 31
    assert [r.case.name for r in rows if not r.agrees] == []


def test_in_process_judges_as_the_child_process_does(tmp_path, monkeypatch):
    """The matrix runs the CLI in-process for speed; the same drift judged by a real
    child process gives the same verdict and records the same run."""
    plain_env(monkeypatch)
    case = next(c for c in CASES if c.name == "3x grad_norm drift")
    build_baseline(tmp_path / "family", case, monkeypatch)
    record = capture(tmp_path / "judged", case.judged)
    verdicts = []
    for how in ("in-process", "child"):
        shutil.copytree(tmp_path / "family", tmp_path / how)
        url, out = str(tmp_path / how / "gk.db"), tmp_path / how / "v.json"
        argv = ("check", record, "-p", PACK, "--history", url, "--record", "--run-id", "j",
                "--json", str(out))
        if how == "child":
            res = gatekeeper(*argv, cwd=tmp_path / how / "miles")
            assert res.returncode == 0, res.stdout + res.stderr
        else:
            gk(tmp_path / how / "miles", monkeypatch, *argv)
        v = json.loads(out.read_text())
        verdicts.append(([(r["rule"], r["status"], r["message"]) for r in v["results"]],
                         {k: v["run"]["history"][k] for k in ("trusted", "values", "series")},
                         gk_trusted(url, identity(case), GRAD)))
    assert verdicts[0] == verdicts[1]
    assert ("grad-norm", "fail") == verdicts[0][0][0][:2] and not verdicts[0][1]["trusted"]
