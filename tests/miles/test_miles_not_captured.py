"""A miles CI record keeps 7 keys of every log dict (radixark/miles
31f1ca961a94cb860cec3b2dea34ec332bfa8f76, `miles/utils/tracking_utils/ci_history.py`
TARGET_METRIC_KEYS), so the pack's rules on clipfrac, kl_loss, log-probs, entropy, MTP and
the TITO strict rates cannot be judged there. Judged by `gatekeeper check` (a child
process) on records written as that capture writes them, those rules are skips that say
"not captured by the CI record", counted on the verdict line, in the JSON counts and in
JUnit; the same rules on the run's wandb log (the real SDK) are judged.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from tests.helpers import REPO, gatekeeper, write_record
from tests.miles.capture import TARGET_METRIC_KEYS, Variant, capture_run, merge_attempt

PACK = str(REPO / "policies" / "miles")
JUNIT_SCHEMA = xmlschema.XMLSchema(str(REPO / "tests" / "data" / "junit-4.xsd"))
REASON = "not captured by the CI record"
# The pack's if_logged rules on metrics the record never keeps, for the default variant
# (the R3 log-prob variant is skipped by its `when`, not by the record).
NOT_CAPTURED = {
    "miles-ci-consistency/pg-clipfrac-rollout-start",
    "miles-ci-consistency/kl-loss-step0",
    "miles-logprob-checker/logprobs-match-ref-rollout0",
    "miles-logprob-checker/logprobs-match-rollout-engine",
    "miles-logprob-checker/entropy-open-band",
    "miles-mtp/mtp-loss-below-1",
    "miles-r3/r3-mismatch-fraction",
    *(
        f"miles-tito/{where}{v}-{kind}"
        for where in ("", "eval-")  # eval-: a pattern rule (eval/*/...) matching no key
        for v in ("v1", "v2")
        for kind in ("special-token-count", "special-token-type", "non-assistant-text")
    ),
}


def _check(tmp_path: Path, source: Path, *extra: str) -> tuple[Any, dict[str, Any], ET.Element]:
    out = gatekeeper(
        "check", str(source), "-p", PACK, *Variant().config_flags(), *extra,
        "--json", str(tmp_path / "v.json"), "--junit", str(tmp_path / "v.xml"),
    )
    verdict = json.loads((tmp_path / "v.json").read_text())
    JUNIT_SCHEMA.validate(str(tmp_path / "v.xml"))  # the count is a property readers accept
    return out, verdict, ET.parse(tmp_path / "v.xml").getroot()


def _rows(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['policy']}/{r['rule']}": r for r in verdict["results"]}


@pytest.mark.parametrize("layout", ["attempt-dir", "merged"])
def test_record_says_how_many_rules_it_could_not_judge(tmp_path: Path, layout: str) -> None:
    key = tmp_path / "tests_e2e_test_qwen3_0.6B.py-0123456789"
    source = capture_run(key / "attempt-0", Variant())
    if layout == "merged":
        source = merge_attempt(source, key / "attempt-0.merged.jsonl")
    out, verdict, junit = _check(tmp_path, source)
    assert out.returncode == 0, out.stdout + out.stderr
    # the verdict line, then what the record could not carry on a line of its own
    line, unjudged_line = out.stdout.splitlines()[:2]
    assert line.startswith("gate PASSED") and "not judged" not in line, out.stdout
    assert unjudged_line == f"  {len(NOT_CAPTURED)} rules not judged: {REASON}", out.stdout
    rows = _rows(verdict)
    unjudged = {k for k, r in rows.items() if r["not_judged"] == REASON}
    assert unjudged == NOT_CAPTURED
    for name in NOT_CAPTURED:
        assert rows[name]["status"] == "skip" and REASON in rows[name]["message"], rows[name]
        assert "not logged by this run" not in rows[name]["message"]
    assert verdict["counts"]["not_judged"] == len(NOT_CAPTURED) <= verdict["counts"]["skip"]
    assert verdict["not_judged"] == {REASON: len(NOT_CAPTURED)}
    # what the record keeps is judged as before; a kept key the run did not log is
    # still "not logged by this run" (no TITO server: no assistant_text rate)
    assert rows["miles-ci-consistency/ppo-kl-rollout-start"]["status"] == "pass"
    tito = rows["miles-ci-capture/tito-v1-assistant-text-finite"]
    assert tito["status"] == "skip" and "not logged by this run" in tito["message"]
    assert tito["not_judged"] is None
    props = {
        s.get("name"): [p.get("value") for p in s.iter("property")]
        for s in junit.iter("testsuite")
    }
    assert props["miles-tito"] == [f"12 rules not judged: {REASON}"]
    assert props["miles-ci-consistency"] == [f"2 rules not judged: {REASON}"]
    assert props["miles-ci-capture"] == []


def test_a_required_metric_the_record_cannot_carry_is_counted_not_judged(tmp_path: Path) -> None:
    """MetricChecker's eval/gsm8k on a record (its key in the config, e.g. a run.json copied
    from the test's args): no record can hold it, so it is not judged there —
    a skip the verdict line counts, with the log to judge it on — never an error failing
    every healthy record of a MetricChecker test, and never a pass of the rule."""
    source = capture_run(tmp_path / "k" / "attempt-0", Variant())
    out, verdict, _ = _check(tmp_path, source, "--config", "ci_metric_checker_key=eval/gsm8k")
    assert out.returncode == 0, out.stdout
    rows = _rows(verdict)
    for rule in ("key-at-every-eval", "key-finite", "key-reaches-threshold"):
        row = rows[f"miles-metric-checker/{rule}"]
        assert row["status"] == "skip" and REASON in row["message"], row
        assert "full log" in row["message"] and "if_logged" not in row["message"]
        assert row["not_judged"] == REASON
    assert "rules not judged: " + REASON in out.stdout.splitlines()[1]


def test_rows_with_the_same_keys_are_not_a_ci_record(tmp_path: Path) -> None:
    """Per-step rows are a trainer's own log, not miles' capture: a metric they lack is
    "not logged by this run", and nothing is counted as not judged."""
    rows = []
    for step in range(6):
        rows.append({"train/step": step, "train/grad_norm": 0.2, "train/ppo_kl": 0.0})
        rows.append({"rollout/step": step, "rollout/raw_reward": 0.5})
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, verdict, _ = _check(tmp_path, path)
    assert out.returncode == 0, out.stdout + out.stderr
    clip = _rows(verdict)["miles-ci-consistency/pg-clipfrac-rollout-start"]
    assert clip["status"] == "skip" and "not logged by this run" in clip["message"]
    assert verdict["counts"]["not_judged"] == 0 and "not judged" not in out.stdout


def test_a_record_with_a_key_outside_the_whitelist_is_not_taken_for_one(tmp_path: Path) -> None:
    """A record line on a key miles 31f1ca9 never captures (another writer, or a later
    capture list): gatekeeper does not know what that source keeps, so it claims nothing."""
    series = {key: [(s, 0.0) for s in range(4)] for key in TARGET_METRIC_KEYS[:3]}
    series["train/pg_clipfrac"] = [(s, 0.0) for s in range(4)]
    path = write_record(tmp_path / "r.jsonl", series)
    out, verdict, _ = _check(tmp_path, path)
    assert verdict["counts"]["not_judged"] == 0, out.stdout
    entropy = _rows(verdict)["miles-logprob-checker/entropy-open-band"]
    assert "not logged by this run" in entropy["message"]


def test_run_miles_ends_with_the_same_count(tmp_path: Path) -> None:
    """`gatekeeper run --miles` follows the per-process files as they are rewritten; the
    live tail knows the CI record as `check` does, so the final line says the same."""
    fake = str(Path(__file__).with_name("fake_miles.py"))
    out = gatekeeper(
        "run", "--miles", "--source", str(tmp_path / "records"), "-p", PACK,
        *Variant().config_flags(), "--interval", "0.1", "-q",
        "--json", str(tmp_path / "v.json"), "--", sys.executable, fake, "6", "0.01",
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["not_judged"] == {REASON: len(NOT_CAPTURED)}
    assert f"{len(NOT_CAPTURED)} rules not judged: {REASON}" in out.stdout.splitlines()[-1]
