"""`gatekeeper lint`: rules that cannot work, found before a run is wasted on them."""

from __future__ import annotations

from tests.helpers import REPO, gatekeeper, write_policy

BAD = """
version: 1
name: bad
rules:
  - id: exact
    metric: train/loss
    check: {between: [0.3, 0.3]}
  - id: late-reach
    metric: rollout/raw_reward
    steps: {from: 100}
    check: {reach: {value: 0.75, by_step: 80}}
  - id: step0-debounced
    metric: train/ppo_kl
    steps: [0]
    check: {abs_max: 1.0e-9}
    for: 2
  - id: impossible-when
    metric: train/ppo_kl
    check: {abs_max: 1.0e-3}
    when: {config.lora_rank: {gt: 8, lt: 4}}
  - id: clip-loose
    metric: train/pg_clipfrac
    check: {max: 0.7}
  - id: clip-strict
    metric: train/pg_clipfrac
    check: {max: 0.5}
  - id: any-share
    metric: train/grad_norm
    check: {fraction: {above: 1, max: 1}}
  - id: grad-huge
    metric: train/grad_norm
    check: {max: 1000}
  - id: kl-tiny
    metric: train/train_rollout_kl
    check: {max: 1.0e-6}
  - id: entropy-watch
    metric: train/entropy_loss
    check: {min: 0.01}
    severity: warn
  - id: typo-gate
    metric: train/los
    check: {max: 10}
"""


def test_every_kind_of_finding_names_the_rule_line(tmp_path):
    policy = write_policy(tmp_path / "bad.yaml", BAD)
    out = gatekeeper("lint", str(policy), "--runs", str(REPO / "examples/runs/healthy"))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()

    def finding(rule: str, kind: str) -> str:
        (hit,) = [x for x in lines if f"bad/{rule}: [{kind}]" in x]
        return hit

    # (an open-ended `max: .inf` never reaches lint: the loader refuses non-finite bounds)
    assert finding("exact", "never-passes").startswith(f"{policy}:4:")  # its `- id:` line
    assert "passes only x == 0.3" in finding("exact", "never-passes")
    assert "before the first selected step 100" in finding("late-reach", "never-passes")
    assert "for: 2 needs 2 consecutive points" in finding("step0-debounced", "never-fails")
    assert "config.lora_rank" in finding("impossible-when", "never-applies")
    assert "is shadowed by bad/clip-strict" in finding("clip-loose", "shadowed")
    assert not [x for x in lines if "bad/clip-strict: [shadowed]" in x]
    assert finding("any-share", "never-fails")
    assert "x the largest |value| logged" in finding("grad-huge", "far-threshold")
    assert "fails every point" in finding("kl-tiny", "fails-examples")
    assert "none of the 1 example runs logged" in finding("entropy-watch", "not-logged")
    # a fail rule on a metric no example logs fails every run the gate judges
    typo = finding("typo-gate", "not-logged")
    assert "fail rule on train/los" in typo and "fail the gate on every one of them" in typo
    assert "10 finding(s)" in lines[-1]  # one per rule above, nothing else


def test_a_fail_rule_on_an_unlogged_metric_counts_only_runs_it_applies_to(tmp_path):
    """`match:` or `when:` that the example runs do not meet: the examples say nothing
    about the metric (those runs are skipped, not failed); `if_logged`: it never judges."""
    policy = write_policy(
        tmp_path / "p.yaml",
        """
        version: 1
        name: other-recipe
        match: {config: {recipe: not-this-one}}
        rules:
          - id: eval-rises
            metric: eval/aime
            check: {min: 0.5}
        """,
    )
    out = gatekeeper("lint", str(policy), "--runs", str(REPO / "examples/runs/healthy"))
    assert out.returncode == 0 and "0 finding(s)" in out.stdout, out.stdout + out.stderr
    optional = write_policy(
        tmp_path / "q.yaml",
        """
        version: 1
        name: q
        rules:
          - id: skipped-always
            metric: eval/aime
            if_logged: true
            check: {min: 0.5}
          - id: not-when
            metric: eval/aime
            when: {config.recipe: not-this-one}
            check: {min: 0.5}
        """,
    )
    out = gatekeeper("lint", str(optional), "--runs", str(REPO / "examples/runs/healthy"))
    assert out.returncode == 1, out.stdout + out.stderr
    (hit,) = [x for x in out.stdout.splitlines() if "[not-logged]" in x]
    assert "q/skipped-always" in hit and "only ever be skipped (if_logged)" in hit


def test_the_shipped_packs_lint_clean():
    out = gatekeeper("lint", "policies", cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("ok: 0 finding(s)")


def test_an_invalid_policy_is_a_load_error_not_a_finding(tmp_path):
    policy = write_policy(
        tmp_path / "p.yaml",
        "version: 1\nname: p\nrules:\n  - id: a\n    metric: x\n    check: {max: 1, min: 0}\n",
    )
    out = gatekeeper("lint", str(policy))
    assert out.returncode == 2 and f"{policy}:6" in out.stderr


STRICT = """
version: 1
name: strict
rules:
  - id: kl-inclusive
    metric: train/ppo_kl
    check: {abs_max: 1.0e-9}
  - id: kl-strict
    metric: train/ppo_kl
    check: {abs_lt: 1.0e-9}
  - id: mtp-below
    metric: train/mtp_loss
    check: {lt: 1.0}
  - id: mtp-at-most
    metric: train/mtp_loss
    check: {max: 1.0}
    severity: warn
  - id: mismatch-zero
    metric: rollout/mismatch_rate
    check: {abs_max: 0}
  - id: entropy-open
    metric: rollout/entropy
    check: {strictly_between: [0, 0.7]}
  - id: entropy-closed
    metric: rollout/entropy
    check: {between: [0, 0.7]}
  - id: aime-rise-unselected
    metric: eval/aime
    steps: {from: 1}
    check: {rise: {from_step: 0, by_step: 9, min: 0.06}}
  - id: reach-before-rollout-start
    metric: rollout/raw_reward
    steps: {every: 4, offset: 3}
    check: {reach: {value: 0.75, by_step: 2}}
"""


def test_strict_checks_shadow_by_their_open_ends_and_exact_zero_is_a_real_bound(tmp_path):
    policy = write_policy(tmp_path / "strict.yaml", STRICT)
    out = gatekeeper("lint", str(policy))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    # FILE:LINE: CODE RULE: [kind] message
    found = {x.split(": ", 2)[1].split()[-1]: x for x in lines if ": [" in x}
    # |x| < v fails wherever |x| <= v does (and at exactly v): the inclusive twin is shadowed
    assert "[shadowed] is shadowed by strict/kl-strict" in found["strict/kl-inclusive"]
    assert "strict/kl-strict" not in found
    assert "is shadowed by strict/mtp-below" in found["strict/mtp-at-most"]
    assert "is shadowed by strict/entropy-open" in found["strict/entropy-closed"]
    assert "strict/entropy-open" not in found and "strict/mtp-below" not in found
    # a rate of no events is exactly 0: `abs_max: 0` is miles' `== 0`, not a typo
    assert "strict/mismatch-zero" not in found
    assert "never a value to rise from" in found["strict/aime-rise-unselected"]
    assert "before the first selected step 3" in found["strict/reach-before-rollout-start"]
    assert "5 finding(s)" in lines[-1]
