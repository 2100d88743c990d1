"""A package outside gatekeeper adds a check, a source, a notifier and a command through
entry points alone, and each works end to end through the CLI.

The toy distribution is real files in a temporary directory: a module and a
`*.dist-info` with `entry_points.txt`, put on the child's sys.path, which is exactly how
importlib.metadata finds an installed package."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO

TOYS = '''
"""Toy plug-ins for gatekeeper's entry-point test."""

from __future__ import annotations

import numpy as np

from gatekeeper.checks.base import MaskCheck
from gatekeeper.model import Run, Series
from gatekeeper.notify.base import Notifier
from gatekeeper.notify.settings import NotifierSettings
from gatekeeper.sources.base import Source


class Even(MaskCheck):
    """`even: true` — every judged value is an even number."""

    kind = "even"
    value: bool = True

    def describe(self) -> str:
        return "x is even"

    def violations(self, values: np.ndarray, n_context: int) -> np.ndarray:
        return values % 2 != 0


class Counting(Source):
    """`count://N`: a run whose metric `n` counts 0, 2, 4, ... for N steps (odd at -1)."""

    kind = "count://N"

    @classmethod
    def accepts(cls, spec: str) -> bool:
        return spec.startswith("count://")

    def read(self) -> Run:
        n = int(self.spec.removeprefix("count://").rstrip("!"))
        values = np.arange(n, dtype=np.float64) * 2 + (1 if self.spec.endswith("!") else 0)
        run = Run(name=f"count-{n}", source=self.spec)
        run.series["n"] = Series("n", np.arange(n, dtype=np.int64), values)
        return run


class PigeonSettings(NotifierSettings):
    """A pigeon's own settings, validated with the rest of its `notifiers:` entry."""

    loft: int = 1  # which loft the pigeon flies from


class Pigeon(Notifier):
    kind = "pigeon"
    settings_model = PigeonSettings

    def render(self, groups):  # type: ignore[no-untyped-def]
        return [{"groups": len(groups)}]

    def post(self, body):  # type: ignore[no-untyped-def]
        return None

    @classmethod
    def check_settings(cls, settings):  # type: ignore[no-untyped-def]
        if not settings.resolved_url().startswith("coop://"):
            raise ValueError("a pigeon flies to coop:// addresses only")


def register(sub):  # type: ignore[no-untyped-def]
    p = sub.add_parser("hello", help="say hello (a plug-in command)")
    p.add_argument("who")
    p.set_defaults(func=lambda args: print(f"hello, {args.who}") or 0)
'''

ENTRY_POINTS = """
[gatekeeper.checks]
even = gk_toys:Even

[gatekeeper.sources]
count = gk_toys:Counting

[gatekeeper.notifiers]
pigeon = gk_toys:Pigeon

[gatekeeper.commands]
hello = gk_toys:register
"""


@pytest.fixture
def toys(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    dist = site / "gk_toys-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "gk_toys.py").write_text(TOYS)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gk-toys\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def cli(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)])
    env["COOP_URL"] = "coop://roof"
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_a_plugin_check_and_source_judge_a_run(toys: Path, tmp_path: Path) -> None:
    policy = tmp_path / "even.yaml"
    policy.write_text(textwrap.dedent("""
        version: 1
        name: toys
        rules:
          - id: n-even
            metric: n
            check: {even: true}
    """))
    listed = cli(toys, "checks", cwd=tmp_path)
    assert listed.returncode == 0 and "even " in listed.stdout, listed.stderr
    page = cli(toys, "checks", "even", cwd=tmp_path)  # its docstring; no example shipped
    assert page.returncode == 0 and page.stdout.startswith("even\n\n"), page.stderr
    assert "no example ships with this kind" in page.stdout
    ok = cli(toys, "check", "count://5", "-p", str(policy), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = cli(toys, "check", "count://5!", "-p", str(policy), cwd=tmp_path)
    assert bad.returncode == 1 and "toys/n-even" in bad.stdout, bad.stdout + bad.stderr


def test_a_source_no_kind_opens_names_the_plugin_kinds_too(toys: Path, tmp_path: Path) -> None:
    policy = REPO / "policies" / "rl-health.yaml"
    out = cli(toys, "check", "ftp://nowhere/run", "-p", str(policy), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cannot open source 'ftp://nowhere/run'" in out.stderr, out.stderr
    assert "count://N" in out.stderr and "tensorboard" in out.stderr, out.stderr
    live = cli(toys, "watch", "ftp://nowhere/run", "-p", str(policy), cwd=tmp_path)
    assert live.returncode == 2 and "cannot follow source" in live.stderr, live.stderr
    assert "count://N" not in live.stderr  # the toy kind reads whole runs only


def test_a_plugin_command_runs_and_is_listed(toys: Path, tmp_path: Path) -> None:
    out = cli(toys, "hello", "world", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "hello, world\n", out.stderr
    assert "hello" in cli(toys, "--help", cwd=tmp_path).stdout


def _daemon_config(tmp_path: Path, kind: str, url_env: str, extra: str = "") -> Path:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "n": 0}\n')
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(textwrap.dedent(f"""
        state: {tmp_path / "state.db"}
        targets:
          - source: {run}
            policies: [{REPO / "policies" / "rl-health.yaml"}]
        notifiers:
          - {{name: coop, kind: {kind}, url_env: {url_env}{extra}}}
    """))
    return config


def test_a_plugin_notifier_is_a_config_kind_with_its_own_settings(
    toys: Path, tmp_path: Path
) -> None:
    good = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "pigeon", "COOP_URL")),
               "--check-config", cwd=tmp_path)
    assert good.returncode == 0 and "notifier coop: pigeon" in good.stdout, good.stderr
    # the notifier's own settings check speaks at the entry's line
    bad = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "pigeon", "HOME")),
              "--check-config", cwd=tmp_path)
    assert bad.returncode == 2 and "coop:// addresses only" in bad.stderr, bad.stderr
    # its settings model: its own field is accepted, and refused at file:line:field
    loft = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "pigeon", "COOP_URL",
               ", loft: 3")), "--check-config", cwd=tmp_path)
    assert loft.returncode == 0, loft.stderr
    bad_loft = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "pigeon", "COOP_URL",
                   ", loft: high")), "--check-config", cwd=tmp_path)
    assert bad_loft.returncode == 2, bad_loft.stderr
    assert "gatekeeper.yaml:7: notifiers[0].loft: Input should be a valid integer" in (
        bad_loft.stderr
    ), bad_loft.stderr
    # a built-in kind does not take the pigeon's field
    slack = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "slack", "COOP_URL",
                ", loft: 3")), "--check-config", cwd=tmp_path)
    assert slack.returncode == 2 and "notifiers[0].loft: Extra inputs" in slack.stderr, (
        slack.stderr
    )
    unknown = cli(toys, "serve", "-c", str(_daemon_config(tmp_path, "owl", "COOP_URL")),
                  "--check-config", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown notifier kind 'owl'" in unknown.stderr
    assert "pigeon" in unknown.stderr, unknown.stderr


def test_a_broken_plugin_is_a_setup_error_not_a_crash(toys: Path, tmp_path: Path) -> None:
    (toys / "gk_toys-0.1.dist-info" / "entry_points.txt").write_text(
        "[gatekeeper.checks]\neven = gk_toys:Missing\n"
    )
    out = cli(toys, "checks", cwd=tmp_path)
    assert out.returncode == 2 and "gk-toys" in out.stderr and "Missing" in out.stderr, (
        out.stderr
    )
