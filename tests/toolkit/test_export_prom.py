"""`gatekeeper export prometheus`: the rules pass the real `promtool check rules`, and the
generated unit tests pass `promtool test rules` on the same inputs `gatekeeper test` uses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, gatekeeper, write_policy

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian's prometheus) missing")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL or "promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def export(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = gatekeeper(
        "export",
        "prometheus",
        *args,
        "-o",
        str(tmp_path / "rules.yml"),
        "--tests-out",
        str(tmp_path / "tests.yml"),
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_shipped_packs_export_and_their_tests_agree_in_promtool(tmp_path):
    out = export(tmp_path, "policies", "--selector", 'job="rl"', "--tests-from", "policies")
    assert "not exportable: rl-health/loss-spike" in out.stdout
    rules = yaml.safe_load((tmp_path / "rules.yml").read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    assert "GatekeeperRlHealthPgClipfracHigh" in names
    assert "GatekeeperRecipeDeepseekV41FlashTrainRolloutKlFlat" in names
    checked = promtool("check", "rules", "rules.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(names)} rules found" in checked.stdout
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    groups = yaml.safe_load((tmp_path / "tests.yml").read_text())["tests"]
    firing = [t for g in groups for t in g["alert_rule_test"] if t["exp_alerts"]]
    assert len(groups) >= 8 and len(firing) >= 6  # silent and firing cases both exercised


POLICY = """
version: 1
name: shapes
rules:
  - id: late-loss
    metric: train/loss
    steps: {from: 3, to: 8}
    check: {max: 1}
  - id: kl-small
    metric: train/kl
    check: {abs_max: 0.1}
    for: 3
  - id: reward-band
    metric: rollout/reward
    check: {between: [0.2, 0.9]}
  - id: lr-about
    metric: train/lr
    check: {approx: {value: 1.0e-6, rel: 0.5}}
  - id: ratio
    expr: "perf/a / perf/b"
    check: {min: 0.5}
  - id: scaled
    expr: "abs(train/kl) * 10 - 1"
    check: {max: 0}
  - id: hung
    metric: train/loss
    check: {stale: {max_seconds: 600}}
  - id: gap-trend
    metric: train/loss
    check: {trend: {window: 5, max_slope: 1}}
"""

TESTS = """
tests:
  - name: late loss above 1 inside the range fails; before it does not
    series: {train/loss: "5 5 0.5 0.5 2 0.5 _ 0.5 0.5 9"}
    expect: {late-loss: {status: fail, step: 4}}
  - name: kl over 0.1 three points in a row fails, two do not
    series: {train/kl: "0 -0.2x1 0 -0.2 0.3 -0.5 0"}
    chunk: 2
    expect: {kl-small: {status: fail, step: 6}, scaled: {status: fail, step: 1}}
  - name: reward and lr in band pass
    series: {rollout/reward: "0.5+0.05x7", train/lr: "1e-6x5"}
    expect: {reward-band: pass, lr-about: pass}
  - name: reward below the band and lr off by 2x fail
    series: {rollout/reward: "0.5 0.1", train/lr: "1e-6 2e-6"}
    expect: {reward-band: {status: fail, step: 1}, lr-about: {status: fail, step: 1}}
  - name: a ratio below one half fails at its step
    series: {perf/a: "10 10 4 10", perf/b: "10x3"}
    expect: {ratio: {status: fail, step: 2}}
  - name: a NaN reward is an error, and the alert fires there
    series: {rollout/reward: "0.5 NaN 0.5"}
    expect: {reward-band: {status: error, step: 1}}
"""


def test_shapes_export_with_ranges_for_ratios_and_stale(tmp_path):
    write_policy(tmp_path / "shapes.yaml", POLICY)
    write_policy(tmp_path / "shapes.test.yaml", TESTS)
    assert gatekeeper("test", str(tmp_path / "shapes.test.yaml")).returncode == 0
    out = gatekeeper(
        "export",
        "prometheus",
        str(tmp_path / "shapes.yaml"),
        "-o",
        str(tmp_path / "rules.yml"),
        "--tests-from",
        str(tmp_path),
        "--tests-out",
        str(tmp_path / "tests.yml"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not exportable: shapes/gap-trend" in out.stdout
    text = (tmp_path / "rules.yml").read_text()
    assert 'changes(gatekeeper_metric_step{metric="train/loss"}[600s]) == 0' in text
    assert "/ ignoring(metric)" in text and "for: 120s" in text
    assert promtool("check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "'late loss above 1'" not in out.stdout  # the gap is fine without `for`


def test_a_drifted_rule_file_fails_the_generated_promtool_tests(tmp_path):
    write_policy(tmp_path / "shapes.yaml", POLICY)
    write_policy(tmp_path / "shapes.test.yaml", TESTS)
    gatekeeper(
        "export",
        "prometheus",
        str(tmp_path / "shapes.yaml"),
        "-o",
        str(tmp_path / "rules.yml"),
        "--tests-from",
        str(tmp_path),
        "--tests-out",
        str(tmp_path / "tests.yml"),
    )
    rules = tmp_path / "rules.yml"
    rules.write_text(rules.read_text().replace("<= 0.9", "<= 0.95").replace(">= 0.2", ">= 0.05"))
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 1
    assert "GatekeeperShapesRewardBand" in tested.stdout + tested.stderr


def test_a_mapping_file_renames_series_and_bad_ones_exit_2(tmp_path):
    write_policy(tmp_path / "shapes.yaml", POLICY)
    mapping = write_policy(
        tmp_path / "map.yaml",
        """
        value: trainer_metric
        metric_label: name
        metrics:
          train/lr: 'optimizer_lr{job="trainer"}'
    """,
    )
    out = gatekeeper(
        "export",
        "prometheus",
        str(tmp_path / "shapes.yaml"),
        "-o",
        str(tmp_path / "r.yml"),
        "--mapping",
        str(mapping),
    )
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "r.yml").read_text()
    assert (
        'trainer_metric{name="rollout/reward"}' in text
        and 'abs(optimizer_lr{job="trainer"} - 1e-06)' in text
    )
    assert promtool("check", "rules", "r.yml", cwd=tmp_path).returncode == 0
    bad = write_policy(tmp_path / "bad.yaml", "value: x\nmetricz: {}\n")
    out = gatekeeper(
        "export",
        "prometheus",
        str(tmp_path / "shapes.yaml"),
        "-o",
        str(tmp_path / "r.yml"),
        "--mapping",
        str(bad),
    )
    assert out.returncode == 2
    assert f"{bad}:2: metricz" in out.stderr
    # a list was taken as no mapping at all; a missing file was "cannot read policy"
    (tmp_path / "list.yaml").write_text("[]\n")
    for name, error in (("list.yaml", "a mapping file is a YAML mapping (value, step, "
                                      "metric_label, run_label, selector, metrics)"),
                        ("missing.yaml", "cannot read mapping: No such file or directory")):
        out = gatekeeper("export", "prometheus", str(tmp_path / "shapes.yaml"), "-o",
                         str(tmp_path / "r.yml"), "--mapping", str(tmp_path / name))
        assert out.returncode == 2 and out.stderr.strip() == (
            f"gatekeeper: error: {tmp_path / name}: {error}"), out.stderr


STRICT = """
version: 1
name: strict
rules:
  - id: mtp-below
    metric: train/mtp_loss
    check: {lt: 1.0}
    if_logged: true
  - id: kl-floor
    metric: train/ppo_kl
    check: {gt: -1.0e-3}
  - id: kl-tiny
    metric: train/kl
    check: {abs_lt: 0.1}
  - id: entropy-open
    metric: rollout/entropy
    check: {strictly_between: [0, 0.7]}
  - id: kl-every-rollout
    metric: train/ppo_kl
    steps: {every: config.num_steps_per_rollout, default: 1}
    check: {abs_lt: 1.0e-9}
  - id: grad-replay
    metric: train/grad_norm
    check: {isclose: {reference: grad-norm, rel_tol: 0.03, abs_tol: 0.03}}
  - id: aime-rises
    metric: eval/aime
    check: {rise: {from_step: 0, by_step: 9, min: 0.06}}
"""

STRICT_TESTS = """
tests:
  - name: the strict ends fail exactly at the bound
    series:
      train/mtp_loss: "0.5 1 0.5"
      train/ppo_kl: "0 -0.001 0"
      train/kl: "0 -0.1 0"
      rollout/entropy: "0.5 0.5 0"
    expect:
      mtp-below: {status: fail, step: 1}
      kl-floor: {status: fail, step: 1}
      kl-tiny: {status: fail, step: 1}
      entropy-open: {status: fail, step: 2}
  - name: just inside passes
    series:
      train/mtp_loss: "0.999x3"
      train/ppo_kl: "-0.0009x3"
      train/kl: "0.0999 -0.0999"
      rollout/entropy: "0.0001 0.6999"
    expect: {mtp-below: pass, kl-floor: pass, kl-tiny: pass, entropy-open: pass}
"""


def test_strict_checks_export_as_strict_comparisons_and_the_rest_say_why_not(tmp_path):
    write_policy(tmp_path / "strict.yaml", STRICT)
    write_policy(tmp_path / "strict.test.yaml", STRICT_TESTS)
    assert gatekeeper("test", str(tmp_path / "strict.test.yaml")).returncode == 0
    out = export(tmp_path, str(tmp_path / "strict.yaml"), "--tests-from", str(tmp_path))
    text = (tmp_path / "rules.yml").read_text()
    v = 'gatekeeper_metric_value{metric="train/mtp_loss"}'
    assert f"{v} unless ({v} < 1.0 and {v} > -Inf)" in text
    assert 'gatekeeper_metric_value{metric="train/ppo_kl"} > -0.001 and' in text
    assert 'abs(gatekeeper_metric_value{metric="train/kl"}) < 0.1)' in text
    assert "> 0.0 and" in text and "< 0.7)" in text
    assert "strict/kl-every-rollout" in out.stdout and "period from run config" in out.stdout
    assert "(--reference grad-norm=RUN), which Prometheus does not have" in out.stdout
    assert "rise compares with the value at step 0" in out.stdout
    assert promtool("check", "rules", "rules.yml", cwd=tmp_path).returncode == 0
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # a strict bound loosened to an inclusive one no longer fires at exactly the bound
    rules = tmp_path / "rules.yml"
    rules.write_text(rules.read_text().replace("< 1.0 and", "<= 1.0 and"))
    drifted = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert drifted.returncode == 1 and "GatekeeperStrictMtpBelow" in drifted.stdout + drifted.stderr


def test_a_policy_that_requires_config_is_not_exportable_with_the_reason(tmp_path):
    policy = REPO / "policies/miles/ci-consistency.yaml"
    out = export(
        tmp_path, str(policy), "--tests-from", str(policy.with_name("ci-consistency.test.yaml"))
    )
    assert "not exportable: miles-ci-consistency/ppo-kl-rollout-start" in out.stdout
    needs = "the policy requires config (train_backend, lora_rank, multi_latent_attention"
    assert needs in out.stdout


def test_a_rule_on_a_metric_pattern_is_not_exportable_with_the_reason(tmp_path):
    """miles-tito's eval rules stand for every eval set's metric (`eval/*/...`): Prometheus
    gets no rule that would silently watch none; the rollout rules still export."""
    policy = REPO / "policies/miles/tito.yaml"
    out = export(tmp_path, str(policy), "--tests-from", str(policy.with_name("tito.test.yaml")))
    assert "not exportable: miles-tito/eval-v1-special-token-count" in out.stdout
    assert "stands for the metrics a run names" in out.stdout
    assert "not exportable: miles-tito/v1-special-token-count" not in out.stdout
