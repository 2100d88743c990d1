"""gatekeeper against miles' own in-trainer checks, case by case (the issue's Done-when test).

37 runs, each a sequence of the log dicts miles writes plus its args, mirroring radixark/miles
31f1ca961a94cb860cec3b2dea34ec332bfa8f76. `miles_checks_ref.miles_verdict` (our rewrite of
check_kl, check_grad_norm, check_mtp_loss, the log-prob checker, the TITO asserts and
MetricChecker) says whether miles' run passes. Each run is written twice, as miles writes
it: a wandb offline run (the real SDK, `wandb_writer.py`) and a CI record (`capture.py`,
miles' CiHistoryBackend and harness merge). `gatekeeper check -p policies/miles` judges both,
through the CLI's own entry point (`gatekeeper.cli.main.main`) in-process for speed; a
real child process judges two of them the same (test_a_child_process_judges_as_in_process).
Expected:

- wandb: gatekeeper's verdict is miles' verdict (a fail for the same metric), except the
  cases in STRICTER_ON_PURPOSE (gatekeeper fails a run miles passes, on purpose; each is
  in docs/miles.md "Agreement with miles");
- CI record (7 keys, `capture.TARGET_METRIC_KEYS`; the args passed as `--config`): the same
  wherever the record carries the metric the verdict turns on; where miles fails on a
  metric the record cannot carry, gatekeeper passes the record and says "not captured".

PENDING cases disagree for a reason another change is fixing; they are strict xfails, so
the test fails once that change lands and the entry must go. OPEN: disagreements nobody is
fixing yet (also strict xfails, named in the report).
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz.harness import run_cli
from tests.helpers import REPO, gatekeeper, marker
from tests.miles.capture import TARGET_METRIC_KEYS, CiCapture, Variant, miles_log
from tests.miles.miles_checks_ref import Event, Failure, miles_verdict
from tests.wandb.conftest import sdk_env

WRITER = Path(__file__).with_name("wandb_writer.py")
PACK = str(REPO / "policies" / "miles")
Edit = Callable[[str, dict[str, Any]], None]

DEFAULT = Variant()
KL_LOSS = Variant("kl-loss", use_kl_loss=True)
LORA = Variant("lora", lora_rank=16)
MLA = Variant("mla", multi_latent_attention=True)
R3 = Variant("r3", use_rollout_routing_replay=True, use_kl_loss=True)
TWO_STEPS = Variant("2-steps", num_steps_per_rollout=2, use_kl_loss=True)
GSM8K = {"ci_metric_checker_key": "eval/gsm8k", "ci_metric_checker_threshold": 0.71}
TITO_V2 = "rollout/tito_session_mismatch_rate/v2"


@dataclass(frozen=True)
class Case:
    name: str
    args: dict[str, Any]
    events: tuple[Event, ...]
    miles: str  # what miles' checks do with this run, written by hand: "pass" or "fail"
    replay: bool = False  # run B of a grad-norm replay; run A is REFERENCE

    def __str__(self) -> str:
        return self.name


def run(v: Variant, *edits: Edit, rollouts: int = 8, first_rollout: int = 0,
        evals: tuple[dict[str, Any], ...] = ()) -> tuple[Event, ...]:
    """miles_log(v) changed by `edits`, from `first_rollout` (a resumed run), then `evals`."""
    n = v.num_steps_per_rollout
    out = []
    for process, metrics, key in miles_log(v, rollouts):
        if metrics[key] < first_rollout * (n if key == "train/step" else 1):
            continue
        metrics = dict(metrics)
        for edit in edits:
            edit(process, metrics)
        out.append((process, metrics, key))
    out += [("rollout", {"eval/step": i, **e}, "eval/step") for i, e in enumerate(evals)]
    return tuple(out)


def train_at(step: int, key: str, value: Any) -> Edit:
    def edit(process: str, m: dict[str, Any]) -> None:
        if m.get("train/step") == step:
            m[key] = value
    return edit


def rollout_at(r: int | None, key: str, value: Any) -> Edit:
    """Set `key` at rollout `r` (every rollout when None); a callable value gets the dict."""
    def edit(process: str, m: dict[str, Any]) -> None:
        if "rollout/step" in m and r in (None, m["rollout/step"]):
            m[key] = value(m) if callable(value) else value
    return edit


def drop(*keys: str) -> Edit:
    def edit(process: str, m: dict[str, Any]) -> None:
        for key in keys:
            m.pop(key, None)
    return edit


def tito(kind: str, r: int, rate: float) -> Edit:
    """A v2 TITO session server: every rollout logs the rates; `kind` is `rate` at `r`."""
    def edit(process: str, m: dict[str, Any]) -> None:
        if "rollout/step" in m:
            m[TITO_V2] = 0.1
            m[f"{TITO_V2}/assistant_text"] = 0.1  # non-critical in miles
            for k in ("special_token_count", "special_token_type", "non_assistant_text"):
                m[f"{TITO_V2}/{k}"] = rate if (k == kind and m["rollout/step"] == r) else 0.0
    return edit


def args(v: Variant, **extra: Any) -> dict[str, Any]:
    """The miles args a case's run logs (config=args.__dict__); the keys the checks read."""
    return {**v.config(), "ci_test": True, "train_backend": "megatron", **extra}


FSDP = {"train_backend": "fsdp"}
MTP = {"enable_mtp_training": True}
REPLAY = {"ci_load_grad_norm": "/ci/grad_norm/{role}_{rollout_id}_{step_id}.pt"}
REFERENCE = Case("replay-reference-run-a",
                 args(DEFAULT, ci_save_grad_norm="/ci/grad_norm/{role}_{rollout_id}_{step_id}.pt"),
                 run(DEFAULT), "pass")
GAP = 0.05


def _scaled(process: str, m: dict[str, Any]) -> None:
    if "train/grad_norm" in m:
        m["train/grad_norm"] *= 1.02


CASES: tuple[Case, ...] = (
    Case("healthy-default", args(DEFAULT), run(DEFAULT), "pass"),
    Case("healthy-lora", args(LORA), run(LORA), "pass"),
    Case("healthy-mla", args(MLA), run(MLA), "pass"),
    Case("healthy-kl-loss", args(KL_LOSS), run(KL_LOSS), "pass"),
    Case("healthy-r3", args(R3), run(R3), "pass"),
    Case("healthy-fsdp", args(DEFAULT, **FSDP), run(DEFAULT), "pass"),
    Case("healthy-2-steps-per-rollout", args(TWO_STEPS), run(TWO_STEPS), "pass"),
    Case("ppo-kl-negative-step0", args(DEFAULT),
         run(DEFAULT, train_at(0, "train/ppo_kl", -0.3)), "fail"),
    Case("ppo-kl-negative-step0-mla", args(MLA),
         run(MLA, train_at(0, "train/ppo_kl", -0.3)), "pass"),
    Case("ppo-kl-negative-step0-fsdp", args(DEFAULT, **FSDP),
         run(DEFAULT, train_at(0, "train/ppo_kl", -0.3)), "pass"),
    Case("ppo-kl-step7", args(DEFAULT), run(DEFAULT, train_at(7, "train/ppo_kl", 0.05)), "fail"),
    Case("ppo-kl-above-lora-bound", args(LORA),
         run(LORA, train_at(3, "train/ppo_kl", 2e-8)), "fail"),
    Case("ppo-kl-2-steps-inside-rollout", args(TWO_STEPS),
         run(TWO_STEPS, train_at(7, "train/ppo_kl", 0.05)), "pass"),
    Case("ppo-kl-2-steps-rollout-start", args(TWO_STEPS),
         run(TWO_STEPS, train_at(8, "train/ppo_kl", 0.05)), "fail"),
    Case("pg-clipfrac-rollout-start", args(DEFAULT),
         run(DEFAULT, train_at(4, "train/pg_clipfrac", 0.01)), "fail"),
    Case("pg-clipfrac-mla-unchecked", args(MLA),
         run(MLA, train_at(0, "train/pg_clipfrac", 0.3)), "pass"),
    Case("kl-loss-step0", args(KL_LOSS), run(KL_LOSS, train_at(0, "train/kl_loss", 2e-9)), "fail"),
    Case("nan-grad-norm", args(DEFAULT),
         run(DEFAULT, train_at(3, "train/grad_norm", float("nan"))), "pass"),
    Case("nan-ppo-kl", args(DEFAULT), run(DEFAULT, train_at(2, "train/ppo_kl", float("nan"))),
         "fail"),
    Case("nan-eval", args(DEFAULT, **GSM8K),
         run(DEFAULT, evals=({"eval/gsm8k": 0.75}, {"eval/gsm8k": float("nan")})), "pass"),
    Case("no-rollout-engine-logprobs", args(DEFAULT),
         run(DEFAULT, drop("rollout/rollout_log_probs", "train/train_rollout_logprob_abs_diff",
                           "train/train_rollout_kl")), "pass"),
    Case("eval-without-the-checked-key", args(DEFAULT, **GSM8K),
         run(DEFAULT, evals=({"eval/gsm8k": 0.8}, {"eval/math": 0.3})), "fail"),
    Case("logprob-ref-gap-rollout0", args(DEFAULT),
         run(DEFAULT, rollout_at(0, "rollout/ref_log_probs",
                                 lambda m: m["rollout/log_probs"] + 2e-8)), "fail"),
    Case("logprob-rollout-engine-gap", args(DEFAULT),
         run(DEFAULT, rollout_at(2, "rollout/rollout_log_probs",
                                 lambda m: m["rollout/log_probs"] - GAP)), "fail"),
    Case("entropy-zero", args(DEFAULT), run(DEFAULT, rollout_at(2, "rollout/entropy", 0.0)),
         "fail"),
    Case("entropy-at-0.7", args(DEFAULT), run(DEFAULT, rollout_at(4, "rollout/entropy", 0.7)),
         "fail"),
    Case("mtp-loss-reaches-1", args(DEFAULT, **MTP),
         run(DEFAULT, lambda p, m: m.update({"train/mtp_loss": 0.4} if "train/step" in m else {}),
             train_at(5, "train/mtp_loss", 1.0)), "fail"),
    Case("tito-assistant-text-only", args(DEFAULT, use_session_server="v2"),
         run(DEFAULT, tito("none", 0, 0.0)), "pass"),
    Case("tito-non-assistant-text", args(DEFAULT, use_session_server="v2"),
         run(DEFAULT, tito("non_assistant_text", 3, 0.01)), "fail"),
    Case("tito-eval-special-token-count", args(DEFAULT, use_session_server="v2"),
         run(DEFAULT, tito("none", 0, 0.0), evals=(
             {"eval/gsm8k": 0.75, "eval/gsm8k/tito_session_mismatch_rate/v2": 0.1,
              "eval/gsm8k/tito_session_mismatch_rate/v2/special_token_count": 0.02},)), "fail"),
    Case("metric-checker-reached", args(DEFAULT, **GSM8K),
         run(DEFAULT, evals=tuple({"eval/gsm8k": x} for x in (0.55, 0.72, 0.69))), "pass"),
    Case("metric-checker-below", args(DEFAULT, **GSM8K),
         run(DEFAULT, evals=tuple({"eval/gsm8k": x} for x in (0.6, 0.7099))), "fail"),
    Case("metric-checker-threshold-from-args",
         args(DEFAULT, ci_metric_checker_key="eval/gsm8k", ci_metric_checker_threshold=0.5),
         run(DEFAULT, evals=tuple({"eval/gsm8k": x} for x in (0.55, 0.6))), "pass"),
    Case("metric-checker-other-key",
         args(DEFAULT, ci_metric_checker_key="eval/aime", ci_metric_checker_threshold=0.2),
         run(DEFAULT, evals=tuple({"eval/aime": x} for x in (0.1, 0.15))), "fail"),
    Case("grad-norm-replay-within", args(DEFAULT, **REPLAY), run(DEFAULT, _scaled), "pass",
         replay=True),
    Case("grad-norm-replay-outside", args(DEFAULT, **REPLAY),
         run(DEFAULT, train_at(4, "train/grad_norm", 0.31)), "fail", replay=True),
    # miles logs its args before a checkpoint loads: start_rollout_id is None on a resume
    # (arguments.py sets 0 only when --load holds no checkpoint)
    Case("resumed-without-step0", args(KL_LOSS, start_rollout_id=None),
         run(KL_LOSS, rollout_at(None, "rollout/ref_log_probs",
                                 lambda m: m["rollout/log_probs"]), first_rollout=3), "pass"),
)

# case: (the metric, the rules that fail on it, why gatekeeper is stricter than miles)
STRICTER_ON_PURPOSE: dict[str, tuple[str, tuple[str, ...], str]] = {
    "ppo-kl-negative-step0-mla": (
        "train/ppo_kl", ("miles-ci-consistency/ppo-kl-rollout-start-mla-floor",),
        "the MLA floor: miles' signed `ppo_kl < 1e-8` passes -0.3; gatekeeper adds ppo_kl > -1e-3"),
    "nan-grad-norm": (
        "train/grad_norm", ("miles-ci-capture/grad-norm-finite",),
        "NaN grad_norm: miles asserts grad_norm only when replaying; a NaN is never a pass"),
    "nan-eval": (
        "eval/gsm8k", ("miles-metric-checker/key-finite",
                       "miles-metric-checker/key-reaches-threshold"),
        "NaN eval: MetricChecker takes NaN as a value (`is not None`) and passes when another "
        "eval reaches the threshold; gatekeeper wants a finite value at every eval"),
}

PENDING_WANDB: dict[str, str] = {}
PENDING_RECORD: dict[str, str] = {}
OPEN_WANDB: dict[str, str] = {}
SOURCES = ("wandb", "record")


@dataclass
class Judged:
    exit_code: int
    results: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""


# wandb_writer.py once per spec in one child process (the SDK starts once for all runs;
# its settings, run dir included, are fixed at that start): each spec's run is the run
# directory that appeared while it was written, printed as "SPEC<TAB>RUN_DIR"
_WRITE_EACH = """
import os, runpy, sys
writer, runs, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
for spec in specs:
    before = set(os.listdir(runs)) if os.path.isdir(runs) else set()
    sys.argv = [writer, spec]
    try:
        runpy.run_path(writer, run_name="__main__")
    except SystemExit as done:
        if done.code:
            raise
    (new,) = [d for d in set(os.listdir(runs)) - before if d.startswith("offline-run-")]
    print(spec, os.path.join(runs, new), sep="\t", flush=True)
"""


def _write_wandb(root: Path, cases: tuple[Case, ...]) -> dict[str, Path]:
    """Each case logged with the real SDK as miles logs it; name -> its run directory."""
    specs = {}
    for case in cases:
        spec = root / f"{case.name}.json"
        events = [{k: marker(v) for k, v in m.items()} for _, m, _ in case.events]
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps({"config": case.args, "events": events}))
        specs[str(spec)] = case.name
    proc = subprocess.run(
        [sys.executable, "-c", _WRITE_EACH, str(WRITER), str(root / "wandb"), *specs],
        env=sdk_env(root), cwd=root, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = dict(line.split("\t") for line in proc.stdout.splitlines() if "\t" in line)
    assert set(written) == set(specs), proc.stdout[-2000:]
    return {specs[spec]: Path(run) for spec, run in written.items()}


def _write_record(root: Path, case: Case) -> Path:
    """The attempt directory miles' harness gives the run; one capture per process."""
    attempt = root / case.name / "attempt-0"
    procs = {"trainer": CiCapture(attempt, 1201), "rollout": CiCapture(attempt, 1202)}
    for process, metrics, step_key in case.events:
        procs[process].log(metrics, step_key)
    return attempt


def _argv(source: Path, case: Case, reference: Path, out: Path, record: bool) -> list[str]:
    cmd = ["check", str(source), "-p", PACK, "-q", "--json", str(out)]
    if record:  # a record carries no config: pass the args the test passes to miles
        for key, value in case.args.items():
            cmd += ["--config", f"{key}={json.dumps(value)}"]
    if case.replay:
        cmd += ["--reference", f"grad-norm={reference}"]
    return cmd


def _judged(code: int, out: Path, output: str) -> Judged:
    results = json.loads(out.read_text())["results"] if out.exists() else []
    return Judged(code, results, output[-6000:])


@dataclass
class Written:
    """Every case written both ways, where the cases' verdicts go."""

    root: Path
    wandb: dict[str, Path]
    record: dict[str, Path]

    def argv(self, case: Case, source: str, out: Path) -> list[str]:
        runs = self.wandb if source == "wandb" else self.record
        return _argv(runs[case.name], case, runs[REFERENCE.name], out, source == "record")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    root = tmp_path_factory.mktemp("agreement")
    everything = (REFERENCE, *CASES)
    return Written(root, _write_wandb(root / "wandb", everything),
                   {c.name: _write_record(root / "records", c) for c in everything})


@pytest.fixture(scope="module")
def judged(written: Written) -> dict[tuple[str, str], Judged]:
    """Every case judged by the CLI's entry point, in this process, in the environment a
    child gets from tests.helpers.gatekeeper (no GITHUB_*: no annotations)."""
    out: dict[tuple[str, str], Judged] = {}
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("GITHUB_")]:
            mp.delenv(key)
        for case in CASES:
            for source in SOURCES:
                verdict = written.root / "verdicts" / f"{case.name}.{source}.json"
                verdict.parent.mkdir(exist_ok=True)
                code, stdout, stderr, _ = run_cli(written.argv(case, source, verdict))
                out[case.name, source] = _judged(code, verdict, stdout + stderr)
    return out


@pytest.mark.parametrize(("name", "source"), [("grad-norm-replay-outside", "wandb"),
                                              ("ppo-kl-step7", "record")])
def test_a_child_process_judges_as_in_process(
    name: str, source: str, written: Written, judged: dict[tuple[str, str], Judged]
) -> None:
    """The matrix runs the CLI in-process for speed; `gatekeeper check` in a child process
    (a wandb run with --reference, a record with --config) gives the same verdict."""
    case = next(c for c in CASES if c.name == name)
    verdict = written.root / "child" / f"{name}.{source}.json"
    verdict.parent.mkdir(exist_ok=True)
    proc = gatekeeper(*written.argv(case, source, verdict), timeout=300)
    child = _judged(proc.returncode, verdict, proc.stdout + proc.stderr)
    inproc = judged[name, source]
    assert (child.exit_code, child.results) == (inproc.exit_code, inproc.results), child.output
    assert outcome(case, child) == expected(case, source) == "agree"


def miles_of(case: Case) -> Failure | None:
    return miles_verdict(case.args, case.events, REFERENCE.events if case.replay else None)


def _touches(result: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a rule's metric (a name, an expr's names, or a name pattern) is one of `keys`."""
    names = (result.get("metric") or "").replace("(", " ").replace(")", " ").split()
    return any(fnmatch.fnmatchcase(k, name) for k in keys for name in names)


def _gating_bad(j: Judged) -> list[dict[str, Any]]:
    return [r for r in j.results if r["status"] in ("fail", "error")
            and r["mode"] == "enforce" and r["severity"] == "fail"]


def outcome(case: Case, j: Judged) -> str:
    """How gatekeeper's verdict on one source relates to miles' verdict on the run."""
    failure, bad = miles_of(case), _gating_bad(j)
    names = sorted(f"{r['policy']}/{r['rule']}" for r in bad)
    if j.exit_code not in (0, 1):
        return f"gatekeeper exit {j.exit_code}: {j.output[-400:]}"
    if failure is None:
        if j.exit_code == 0:
            return "agree"
        stricter = STRICTER_ON_PURPOSE.get(case.name)
        if stricter and set(names) <= set(stricter[1]):
            return "stricter"
        return f"miles passes, gatekeeper fails on {names}"
    if j.exit_code == 1 and any(_touches(r, failure.keys) for r in bad):
        return "agree"
    if j.exit_code == 0 and any(r["status"] == "skip" and "not captured" in r["message"]
                                and _touches(r, failure.keys) for r in j.results):
        return "not captured"
    return f"miles fails ({failure}), gatekeeper exits {j.exit_code} on {names}"


def expected(case: Case, source: str) -> str:
    failure = miles_of(case)
    stricter = STRICTER_ON_PURPOSE.get(case.name)
    if stricter and (source == "wandb" or stricter[0] in TARGET_METRIC_KEYS):
        return "stricter"
    if failure and source == "record" and not set(failure.keys) & set(TARGET_METRIC_KEYS):
        return "not captured"
    return "agree"


def _known(source: str) -> dict[str, str]:
    return {**OPEN_WANDB, **PENDING_WANDB} if source == "wandb" else PENDING_RECORD


def _params(source: str) -> list[Any]:
    """One param per case; a known disagreement is a strict xfail naming its reason."""
    out = []
    for case in CASES:
        reason = _known(source).get(case.name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def test_the_table_has_37_cases_and_the_mirror_reads_them_as_written() -> None:
    assert len(CASES) == 37 and len({c.name for c in CASES}) == 37
    wrong = [(c.name, c.miles, miles_of(c)) for c in CASES
             if c.miles != ("pass" if miles_of(c) is None else "fail")]
    assert not wrong
    assert miles_verdict(REFERENCE.args, REFERENCE.events) is None
    known = {*STRICTER_ON_PURPOSE, *PENDING_WANDB, *PENDING_RECORD, *OPEN_WANDB}
    assert known <= {c.name for c in CASES}


def _train(step: int, **metrics: float) -> Event:
    return ("trainer", {"train/step": step, "train/grad_norm": 0.2, "train/ppo_kl": 0.0,
                        "train/pg_clipfrac": 0.0, **metrics}, "train/step")


@pytest.mark.parametrize(("extra", "events", "fails"), [
    ({}, [_train(0, **{"train/ppo_kl": 1e-9})], True),  # strict: 1e-9 itself fails
    ({"multi_latent_attention": True}, [_train(0, **{"train/ppo_kl": -5.0})], False),
    ({"train_backend": "fsdp"}, [_train(0, **{"train/ppo_kl": 5.0})], False),
    ({}, [_train(1, **{"train/kl_loss": 1.0})], False),  # kl_loss at accumulated step 0 only
    ({"use_rollout_routing_replay": True}, [_train(0, **{"train/kl_loss": 1.0})], False),
    ({"ci_load_grad_norm": "x", "ci_save_grad_norm": "y"}, [_train(0)], False),  # save wins
    ({"ci_load_grad_norm": "x"}, [_train(0)], True),  # no saved norm for this step
    ({}, [("rollout", {"rollout/step": 1, "rollout/log_probs": -0.4,
                       "rollout/ref_log_probs": -0.5}, "rollout/step")], False),
    ({"ci_test": False}, [_train(0, **{"train/ppo_kl": 5.0})], False),
])
def test_the_mirror_keeps_miles_scope(extra: dict[str, Any], events: list[Event],
                                      fails: bool) -> None:
    """Where miles does not assert (MLA sign, FSDP, kl_loss after step 0, R3, ref log-probs
    after rollout 0, no --ci-test), the mirror does not either; its bounds are strict."""
    assert (miles_verdict(args(DEFAULT, **extra), events) is not None) is fails


@pytest.mark.parametrize("case", _params("wandb"))
def test_wandb_run_agrees_with_miles(case: Case, judged: dict[tuple[str, str], Judged]) -> None:
    assert outcome(case, judged[case.name, "wandb"]) == expected(case, "wandb")


@pytest.mark.parametrize("case", _params("record"))
def test_ci_record_agrees_with_miles(case: Case, judged: dict[tuple[str, str], Judged]) -> None:
    assert outcome(case, judged[case.name, "record"]) == expected(case, "record")


def figures(judged: dict[tuple[str, str], Judged], source: str) -> tuple[str, set[str]]:
    """One line of figures for `source`, and the cases off their expected outcome. A case
    counts as agreeing only when that is what is expected of it (an error on an eval the
    record cannot carry is no agreement with MetricChecker's failure)."""
    got = {c.name: outcome(c, judged[c.name, source]) for c in CASES}
    want = {c.name: expected(c, source) for c in CASES}
    off = {name for name in got if got[name] != want[name]}
    n = {k: sum(1 for name in got if got[name] == want[name] == k)
         for k in ("agree", "stricter", "not captured")}
    line = (f"{source}: agrees with miles {n['agree']}/37, stricter on purpose "
            f"{n['stricter']}, says 'not captured' {n['not captured']}, off {len(off)}")
    details = [f"  {name}: {got[name]} (expected: {want[name]})" for name in sorted(off)]
    return "\n".join([line, *details]), off


def test_agreement_matrix(judged: dict[tuple[str, str], Judged],
                          record_property: Callable[[str, Any], None]) -> None:
    """The figures, and exactly the declared cases (PENDING, OPEN) off the expected outcome."""
    report = []
    for source in SOURCES:
        text, off = figures(judged, source)
        record_property(f"agreement_{source}", text.splitlines()[0])
        report.append(text)
        assert off == set(_known(source)), "\n".join(report)
    print("\n" + "\n".join(report))
