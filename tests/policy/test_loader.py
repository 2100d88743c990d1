"""Policy files: what loads, and errors that name file, line and field."""

from __future__ import annotations

import pytest

from gatekeeper.errors import PolicyError, UsageError
from gatekeeper.policy.loader import load_policies
from gatekeeper.policy.overrides import apply_cli_overrides, parse_override
from gatekeeper.verdict import Mode, Severity
from tests.helpers import REPO, write_policy

GOOD = """
version: 1
name: p
rules:
  - id: kl
    metric: train/ppo_kl
    steps: [0]
    check: {abs_max: 1.0e-9}
  - id: reward
    metric: rollout/raw_reward
    steps: {from: 0, to: 4}
    reduce: mean
    check: {approx: {value: 0.5, abs: 0.1}}
    severity: warn
"""


def test_loads_rules_with_their_source_lines(tmp_path):
    (policy,) = load_policies([str(write_policy(tmp_path / "p.yaml", GOOD))])
    kl, reward = policy.rules
    assert kl.source.endswith("p.yaml:4") and reward.source.endswith("p.yaml:8")
    assert kl.check.describe() == "|x| <= 1e-09"
    assert reward.severity is Severity.WARN and reward.steps.describe() == "0..4"


def test_shipped_policies_load():
    names = {p.name for p in load_policies([str(REPO / "policies")])}
    assert {"miles-ci-consistency", "recipe-deepseek-v4.1-flash", "rl-health"} <= names


@pytest.mark.parametrize(
    "body, line, words",
    [
        ("    check: {abs_max: -1}\n", 6, "rules[0].check.abs_max.value: Input should be greater than or equal to 0"),
        ("    check: {nope: 1}\n", 6, "unknown check 'nope'; known checks:"),
        ("    check: {max: 1, min: 0}\n", 6, "exactly one check"),
        ("    check: {max: 1}\n    steps: {last: 0}\n", 7, "steps.last must be a whole number >= 1"),
        ("    check: {max: 1}\n    severity: fatal\n", 7, "rules[0].severity: Input should be 'fail' or 'warn'"),
        ("    check: {max: 1}\n    colour: red\n", 7, "rules[0].colour: Extra inputs are not permitted"),
        ("    check: {between: [2, 1]}\n", 6, "lo must be <= hi"),
        ("    check: {max: 1}\n    when: {config.x: {above: 1}}\n", 7, "unknown operator"),
        ("    check: {reach: {value: 1, by_step: 5}}\n    reduce: mean\n", 7, "reduce must be none"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, body, line, words):
    text = "version: 1\nname: p\nrules:\n  - id: r\n    metric: m\n" + body
    path = write_policy(tmp_path / "bad.yaml", text)
    with pytest.raises(PolicyError) as err:
        load_policies([str(path)])
    assert f"bad.yaml:{line}:" in str(err.value)
    assert words in str(err.value)


def test_yaml_syntax_and_duplicate_keys(tmp_path):
    path = write_policy(tmp_path / "bad.yaml", "version: 1\nname: p\nname: q\nrules: []\n")
    with pytest.raises(PolicyError, match=r"bad.yaml:3: invalid YAML"):
        load_policies([str(path)])
    path.write_text("version: 1\nrules: [\n")
    with pytest.raises(PolicyError, match=r"bad.yaml:\d+: invalid YAML"):
        load_policies([str(path)])


def test_missing_required_fields_and_version(tmp_path):
    path = write_policy(tmp_path / "bad.yaml", "version: 2\nname: p\nrules:\n  - id: r\n    check: {max: 1}\n")
    with pytest.raises(PolicyError) as err:
        load_policies([str(path)])
    text = str(err.value)
    assert "bad.yaml:1: version: Input should be 1" in text
    assert "bad.yaml:4: rules[0].metric: is required" in text


def test_duplicate_rule_ids_and_policy_names(tmp_path):
    dup = "version: 1\nname: p\nrules:\n" + "  - {id: r, metric: m, check: {max: 1}}\n" * 2
    with pytest.raises(PolicyError, match="used twice"):
        load_policies([str(write_policy(tmp_path / "a.yaml", dup))])
    one = "version: 1\nname: p\nrules:\n  - {id: r, metric: m, check: {max: 1}}\n"
    write_policy(tmp_path / "d" / "a.yaml", one)
    write_policy(tmp_path / "d" / "b.yaml", one)
    with pytest.raises(PolicyError, match="policy name 'p' is also used"):
        load_policies([str(tmp_path / "d")])


def test_extends_overrides_one_rule_and_replaces_the_base(tmp_path):
    write_policy(tmp_path / "base.yaml", GOOD)
    write_policy(
        tmp_path / "mla.yaml",
        """
        version: 1
        name: p-mla
        extends: base.yaml
        mode: shadow
        overrides:
          - rule: kl
            check: {abs_max: 1.0e-8}
            reason: "MLA kernels differ, tracked in #123"
        rules:
          - {id: extra, metric: m, check: {max: 1}}
        """,
    )
    policies = load_policies([str(tmp_path)])
    assert [p.name for p in policies] == ["p-mla"]  # the base is not run on its own
    kl, reward, extra = policies[0].rules
    assert kl.check.describe() == "|x| <= 1e-08" and kl.override == "MLA kernels differ, tracked in #123"
    assert reward.override is None and kl.mode is Mode.SHADOW and extra.id == "extra"
    assert kl.source.endswith("base.yaml:4")


def test_override_of_unknown_rule_is_an_error(tmp_path):
    write_policy(tmp_path / "base.yaml", GOOD)
    write_policy(
        tmp_path / "x.yaml",
        "version: 1\nname: x\nextends: base.yaml\noverrides:\n  - {rule: nope, off: true, reason: r}\n",
    )
    with pytest.raises(PolicyError, match=r"x.yaml:5: overrides\[0\].rule: 'nope' is not a rule of p"):
        load_policies([str(tmp_path / "x.yaml")])


def test_cli_overrides(tmp_path):
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", GOOD))])
    off = parse_override('p/kl=off:"MLA kernels differ, tracked in #123"')
    relax = parse_override("p/reward=approx={value: 0.5, abs: 0.2}:noisy small batch")
    (policy,) = apply_cli_overrides(policies, [off, relax])
    kl, reward = policy.rules
    assert kl.off and kl.override == "MLA kernels differ, tracked in #123"
    assert reward.check.describe() == "x = 0.5 ± 0.2" and reward.override == "noisy small batch"


@pytest.mark.parametrize(
    "text, words",
    [
        ("p/kl=off", "give the reason"),
        ("kl=off:x", "expected POLICY/RULE"),
        ("p/kl=explode:x", "unknown action"),
        ("p/kl=nope=1:x", "unknown check"),
        ("q/kl=off:x", "no loaded policy is named 'q'"),
        ("p/zz=off:x", "has no rule 'zz'"),
        ("p/kl=abs_max=-1:x", "greater than or equal to 0"),
    ],
)
def test_bad_cli_overrides(tmp_path, text, words):
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", GOOD))])
    with pytest.raises(UsageError, match=None) as err:
        apply_cli_overrides(policies, [parse_override(text)])
    assert words in str(err.value)
