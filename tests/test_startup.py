"""Start-up stays cheap: building the command line and `--version` import none of the
heavy optional dependencies; a command imports what it needs when it runs."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

HEAVY = ("wandb", "httpx", "apscheduler", "prometheus_client", "torch")


def _imported_after(code: str) -> list[str]:
    """The HEAVY top-level packages in sys.modules after `code` runs in a fresh child."""
    probe = (
        f"{code}\n"
        "import sys\n"
        f"print('heavy:', *(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[-1].split()[1:]


def test_importing_the_cli_imports_no_heavy_dependency() -> None:
    assert _imported_after("import gatekeeper.cli.main") == []


def test_version_imports_no_heavy_dependency_nor_numpy() -> None:
    code = (
        "from gatekeeper.cli.main import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import sys\n"
        "assert 'numpy' not in sys.modules, 'numpy imported by --version'\n"
    )
    assert _imported_after(code) == []


def test_building_every_command_imports_no_heavy_dependency() -> None:
    # `--help` of each command builds the whole parser, plug-in commands included
    assert _imported_after("from gatekeeper.cli.main import build_parser\nbuild_parser()") == []


def test_the_follow_default_interval_is_the_live_loops() -> None:
    # cli/live.py repeats the value so that parsing does not import the live loop
    from gatekeeper.cli.live import DEFAULT_INTERVAL
    from gatekeeper.live.loop import DEFAULT_INTERVAL as LOOP_DEFAULT

    assert DEFAULT_INTERVAL == LOOP_DEFAULT
