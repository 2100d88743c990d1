"""`gatekeeper lint`: rules that cannot work, found before a run is wasted on them."""

from __future__ import annotations

from tests.helpers import REPO, gatekeeper, write_policy

BAD = """
version: 1
name: bad
rules:
  - id: open-ended
    metric: train/kl_loss
    check: {max: .inf}
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
"""


def test_every_kind_of_finding_names_the_rule_line(tmp_path):
    policy = write_policy(tmp_path / "bad.yaml", BAD)
    out = gatekeeper("lint", str(policy), "--runs", str(REPO / "examples/runs/healthy"))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()

    def finding(rule: str, kind: str) -> str:
        (hit,) = [x for x in lines if f"bad/{rule}: [{kind}]" in x]
        return hit

    assert finding("open-ended", "never-fails").startswith(
        f"{policy}:4:"
    )  # the rule's `- id:` line
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
    assert "10 finding(s)" in lines[-1]  # one per rule above, nothing else


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
