"""TITO checks as a GLM TITO test runs them, mirroring radixark/miles
31f1ca961a94cb860cec3b2dea34ec332bfa8f76:

- `miles/ray/rollout/metrics.py` `_compute_metrics_from_samples`: from the samples'
  `tito_session_mismatch` lists, `tito_session_mismatch_rate/<v>` and one rate per
  mismatch type (the share of samples with one); under `--ci-test` the three strict rates
  must be 0. It runs for training rollouts (`rollout/...`) and for each eval dataset's
  samples (`eval/<dataset>/...`, on eval/step), so eval samples are asserted too.
- `miles/utils/test_utils/session_verify_runner.py` `assert_session_verify_metrics`: the
  share of samples with an assistant_text mismatch must not exceed
  `--assistant-text-threshold` (default 0.2), and some sample must have been recorded.

`miles_rates`, `miles_ci_assert` and `verifier_assert` restate those computations in our
words; each case asserts that the gate and miles' asserts agree on the same samples. Runs
are written as miles writes them: the wandb log through the real SDK (wandb_writer.py),
the CI record through the capture backend of tests/miles/capture.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gatekeeper import gate
from gatekeeper.verdict import Status
from tests.helpers import REPO, gatekeeper
from tests.miles.capture import CiCapture, Variant
from tests.miles.test_miles_wandb import POLICIES, by_rule, wandb_run

KINDS = ("special_token_count", "special_token_type", "non_assistant_text", "assistant_text")
STRICT = KINDS[:3]
VERIFIER = "miles.utils.test_utils.session_verify_agent.generate"
Samples = list[list[str]]  # per sample, the types of its TITO mismatches


def miles_rates(version: str, samples: Samples) -> dict[str, float]:
    """The TITO keys miles adds to a log dict (before its rollout/ or eval/<name>/ prefix)."""
    prefix = f"tito_session_mismatch_rate/{version}"
    out = {prefix: sum(bool(s) for s in samples) / len(samples)}
    for kind in KINDS:
        out[f"{prefix}/{kind}"] = sum(kind in s for s in samples) / len(samples)
    return out


def miles_ci_assert(rates: dict[str, float]) -> bool:
    """Whether miles' --ci-test TITO assert holds: every strict rate == 0."""
    return all(v == 0 for k, v in rates.items() if k.rsplit("/", 1)[-1] in STRICT)


def verifier_assert(samples: Samples, threshold: float) -> bool:
    """Whether the verifier's cross-sample gate holds on its per-sample file."""
    if not samples:
        return False  # "no per-sample metrics found"
    return sum("assistant_text" in s for s in samples) / len(samples) <= threshold


def _healthy(n: int = 8, assistant: int = 1) -> Samples:
    return [["assistant_text"] if i < assistant else [] for i in range(n)]


def _tito_run(tmp_path: Path, rollouts: list[Samples], evals: list[Samples]) -> Path:
    """A v1 session-server run (GLM's TITO setup): TITO rates on every rollout, and on
    the tbench2 eval set every second rollout (eval/step = the rollout id)."""
    def edit(process: str, m: dict[str, Any]) -> None:
        if process == "rollout":
            rates = miles_rates("v1", rollouts[m["rollout/step"]])
            m.update({f"rollout/{k}": v for k, v in rates.items()})

    events = [
        {"eval/step": 2 * i, "eval/tbench2": 0.4,
         **{f"eval/tbench2/{k}": v for k, v in miles_rates("v1", s).items()}}
        for i, s in enumerate(evals)
    ]
    config = {"use_session_server": True, "tito_model": "glm47", "eval_interval": 2}
    return wandb_run(tmp_path, Variant(), edit, config, events, rollouts=len(rollouts))


EVAL_V1 = "eval/tbench2/tito_session_mismatch_rate/v1"


def test_eval_samples_are_held_to_the_strict_rates(tmp_path: Path) -> None:
    rollouts = [_healthy() for _ in range(4)]
    good_evals = [_healthy(4), _healthy(4)]
    bad_evals = [_healthy(4), [[], ["special_token_type"], [], ["assistant_text"]]]
    assert miles_ci_assert(miles_rates("v1", bad_evals[1])) is False  # miles raises here

    good = gate.check(str(_tito_run(tmp_path / "good", rollouts, good_evals)), POLICIES)
    assert good.exit_code == 0
    rules = by_rule(good)
    for kind in ("special-token-count", "special-token-type", "non-assistant-text"):
        assert rules[f"miles-tito/v1-{kind}"].status is Status.PASS
        metric = f"eval/tbench2/tito_session_mismatch_rate/v1/{kind.replace('-', '_')}"
        assert rules[f"miles-tito/eval-v1-{kind}[{metric}]"].status is Status.PASS
    assert good.not_judged() == {}  # the full log carries every TITO rate

    bad = by_rule(gate.check(str(_tito_run(tmp_path / "bad", rollouts, bad_evals)), POLICIES))
    rule = bad[f"miles-tito/eval-v1-special-token-type[{EVAL_V1}/special_token_type]"]
    assert (rule.status, rule.step, rule.step_key, rule.value) == (
        Status.FAIL, 2, "eval/step", 0.25
    )
    assert bad["miles-tito/v1-special-token-type"].status is Status.PASS
    assert bad[f"miles-tito/eval-v1-non-assistant-text[{EVAL_V1}/non_assistant_text]"].status is (
        Status.PASS
    )


def _verifier_record(tmp_path: Path, versions: dict[str, Samples | None]) -> Path:
    """`run_both_versions`: one miles run per session-server version, one rollout each,
    each process capturing into the harness's attempt directory."""
    attempt = tmp_path / "tests_e2e_sglang_test_session_server_multi_role_test_glm47.py-0a1b2c3d4e"
    attempt /= "attempt-0"
    for pid, (version, samples) in enumerate(versions.items(), start=4100):
        log: dict[str, Any] = {"rollout/step": 0, "rollout/raw_reward": 0.5}
        if samples:  # no sample with TITO metadata: miles logs no TITO rate
            log |= {f"rollout/{k}": v for k, v in miles_rates(version, samples).items()}
        CiCapture(attempt, pid).log(log, "rollout/step")
    return attempt


def _judge_verifier(tmp_path: Path, record: Path, *config: str):
    flags = [x for c in config for x in ("--config", c)]
    out = gatekeeper(
        "check", str(record), "-p", str(REPO / "policies" / "miles" / "tito-verifier.yaml"),
        "-p", str(REPO / "policies" / "miles" / "tito.yaml"),
        "--config", f"custom_generate_function_path={VERIFIER}", *flags,
        "--json", str(tmp_path / "v.json"),
    )
    return out, json.loads((tmp_path / "v.json").read_text())


@pytest.mark.parametrize(
    "threshold, v1, v2",
    [
        (0.2, 1, 1),  # 1/8 each: within the default
        (0.2, 1, 2),  # v2 2/8 = 0.25 > 0.2
        (0.2, 0, 0),
        (0.05, 0, 1),  # DeepSeek-V4's 0.05: 1/8 is over
        (0.1, 0, 0),
        (1.0, 8, 6),  # Nemotron-3 rides at 1.0
    ],
)
def test_verifier_share_agrees_with_miles(
    tmp_path: Path, threshold: float, v1: int, v2: int
) -> None:
    samples = {"v1": _healthy(8, v1), "v2": _healthy(8, v2)}
    miles_passes = all(verifier_assert(s, threshold) for s in samples.values())
    record = _verifier_record(tmp_path, samples)
    out, verdict = _judge_verifier(
        tmp_path, record, "use_session_server=both", f"assistant_text_threshold={threshold}"
    )
    assert out.returncode == (0 if miles_passes else 1), out.stdout + out.stderr
    judged = [r for r in verdict["results"] if r["policy"] == "miles-tito-verifier"
              and r["status"] != "skip"]
    assert len(judged) == 2  # one variant per version, picked by the threshold
    # the strict rates are not in the record: said, never passed
    assert "  12 rules not judged: not captured by the CI record" in out.stdout.splitlines()


def test_verifier_without_samples_or_threshold_is_an_error(tmp_path: Path) -> None:
    record = _verifier_record(tmp_path / "empty", {"v2": None})
    assert verifier_assert([], 0.2) is False
    out, verdict = _judge_verifier(
        tmp_path / "empty", record, "use_session_server=v2", "assistant_text_threshold=0.2"
    )
    assert out.returncode == 1
    rows = {r["rule"]: r for r in verdict["results"]}
    assert rows["v2-assistant-text-share-0.2"]["status"] == "error"

    record = _verifier_record(tmp_path / "nothreshold", {"v2": _healthy()})
    out, verdict = _judge_verifier(tmp_path / "nothreshold", record, "use_session_server=v2")
    assert out.returncode == 1
    rows = {r["rule"]: r for r in verdict["results"]}
    share = rows["v2-assistant-text-share-0.2"]
    assert share["status"] == "error"
    assert "--config assistant_text_threshold=0.2" in share["message"]
