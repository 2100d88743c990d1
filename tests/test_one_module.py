"""Adding a built-in kind is adding one module (one package, for a source family) and
nothing else: a copy of the gatekeeper package gets `checks/even.py`,
`notify/pigeon.py`, `cli/hello.py` and `sources/counting/`, with no other file touched,
and each is then used end to end through the copy's CLI (docs/architecture.md's
walk-through). tests/test_plugins.py does the same from outside, through entry points."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_plugins import TOYS

# test_plugins' toy module, dropped into each place: a place takes only its own kind (the
# check scan takes `Even`, the notifier scan `Pigeon`, the command scan `register`)
FAMILY = '''
from pydantic import BaseModel

from gatekeeper.sources.base import SourceFamily, filter_lists_itself


class CountingFilter(BaseModel):
    """A daemon target `counting: {upto: N}`: the runs count://1 .. count://N."""

    upto: int

    def runs(self) -> list[str]:
        return [f"count://{n}" for n in range(1, self.upto + 1)]

    def describe(self) -> str:
        return f"counting runs up to {self.upto}"


KIND = SourceFamily(
    name="counting",
    examples=("count://5",),
    sources=(Counting,),
    target_key="counting",
    target_model=CountingFilter,
    discovery=filter_lists_itself,
)
'''
MODULES = {
    "checks/even.py": TOYS,
    "notify/pigeon.py": TOYS,
    "cli/hello.py": TOYS,
    "sources/counting/__init__.py": TOYS + FAMILY,
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(
        REPO / "gatekeeper", site / "gatekeeper", ignore=shutil.ignore_patterns("__pycache__")
    )
    for rel, text in MODULES.items():
        path = site / "gatekeeper" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site


def cli(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = str(site)
    env["PIGEON_URL"] = "coop://roof"  # the toy pigeon flies to coop:// addresses only
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_the_copy_is_what_runs(copy: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run(
        [sys.executable, "-c", "import gatekeeper; print(gatekeeper.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.stdout.strip() == str(copy / "gatekeeper" / "__init__.py"), out.stderr


def test_a_check_module_and_a_source_package_judge_a_run(copy: Path, tmp_path: Path) -> None:
    policy = tmp_path / "even.yaml"
    policy.write_text("version: 1\nname: toys\nrules:\n"
                      "  - {id: n-even, metric: n, check: {even: true}}\n")
    listed = cli(copy, "checks", cwd=tmp_path)
    assert listed.returncode == 0 and "even" in listed.stdout, listed.stderr
    families = cli(copy, "sources", cwd=tmp_path)
    assert families.returncode == 0 and "count://5" in families.stdout, families.stderr
    ok = cli(copy, "check", "count://6", "-p", str(policy), "--json", "ok.json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    results = json.loads((tmp_path / "ok.json").read_text())["results"]
    assert [(r["rule"], r["status"]) for r in results if r["rule"] == "n-even"] == [
        ("n-even", "pass")
    ]
    bad = cli(copy, "check", "count://6!", "-p", str(policy), cwd=tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL toys/n-even" in bad.stdout


def test_a_command_module_runs_and_is_in_help(copy: Path, tmp_path: Path) -> None:
    out = cli(copy, "hello", "world", cwd=tmp_path)  # the toy's `hello WHO`
    assert (out.returncode, out.stdout) == (0, "hello, world\n"), out.stderr
    assert "hello" in cli(copy, "--help", cwd=tmp_path).stdout


def test_a_source_package_brings_its_daemon_target_filter(copy: Path, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "version: 1\nname: p\nrules:\n  - {id: r, metric: n, check: {max: 100}}\n"
    )
    config = {"state": "state.db", "targets": [{"counting": {"upto": 3}, "policies": ["p.yaml"]}]}
    (tmp_path / "gk.yaml").write_text(json.dumps(config))
    ok = cli(copy, "serve", "-c", "gk.yaml", "--check-config", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "counting runs up to 3 (3 now)" in ok.stdout
    config["targets"][0]["counting"] = {"upto": "many"}
    (tmp_path / "gk.yaml").write_text(json.dumps(config))
    bad = cli(copy, "serve", "-c", "gk.yaml", "--check-config", cwd=tmp_path)
    assert bad.returncode == 2
    assert "gk.yaml:1: targets[0]: counting.upto: Input should be a valid integer" in bad.stderr
    config["targets"][0] = {"countnig": {"upto": 3}, "policies": ["p.yaml"]}  # a typo
    (tmp_path / "gk.yaml").write_text(json.dumps(config))
    typo = cli(copy, "serve", "-c", "gk.yaml", "--check-config", cwd=tmp_path)
    assert typo.returncode == 2
    assert "targets[0].countnig: Extra inputs are not permitted" in typo.stderr, typo.stderr


def test_a_notifier_module_is_a_kind_the_daemon_config_accepts(
    copy: Path, tmp_path: Path
) -> None:
    (tmp_path / "p.yaml").write_text(
        "version: 1\nname: p\nrules:\n  - {id: r, metric: m, check: {max: 1}}\n"
    )
    config = {
        "state": "state.db",
        "targets": [{"glob": "runs/*.jsonl", "policies": ["p.yaml"]}],
        "notifiers": [{"name": "coop", "kind": "pigeon", "url_env": "PIGEON_URL"}],
    }
    (tmp_path / "gk.yaml").write_text(json.dumps(config))
    ok = cli(copy, "serve", "-c", "gk.yaml", "--check-config", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    config["notifiers"][0]["kind"] = "raven"
    (tmp_path / "gk.yaml").write_text(json.dumps(config))
    bad = cli(copy, "serve", "-c", "gk.yaml", "--check-config", cwd=tmp_path)
    assert bad.returncode == 2
    assert "unknown notifier kind 'raven'; known: lark, pigeon, slack, webhook" in bad.stderr
