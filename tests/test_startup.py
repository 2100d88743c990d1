"""Start-up stays cheap: building the command line and `--version` import none of the
heavy optional dependencies; a command imports what it needs when it runs: `check` of a
JSONL run imports the check kinds its policy names and no others, and no reporter it was
not asked for."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gatekeeper.checks
from tests.helpers import REPO, write_policy, write_rows

HEAVY = ("wandb", "httpx", "apscheduler", "prometheus_client", "torch")


def _modules_after(code: str) -> list[str]:
    """Every module in sys.modules after `code` runs in a fresh child."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    modules: list[str] = json.loads(out.stdout.splitlines()[-1])
    return modules


def _imported_after(code: str) -> list[str]:
    """The HEAVY top-level packages in sys.modules after `code` runs in a fresh child."""
    return [m for m in HEAVY if m in _modules_after(code)]


def _check(run: Path, policy: Path, *flags: str) -> str:
    """`gatekeeper check` in-process, then asserting it passed."""
    argv = ["check", str(run), "-p", str(policy), *flags]
    return f"from gatekeeper.cli.main import main\nassert main({argv!r}) == 0\n"


def _threshold_case(tmp_path: Path) -> tuple[Path, Path]:
    run = write_rows(
        tmp_path / "run.jsonl",
        [{"step": s, "loss": 1.0 / (s + 1), "grad_norm": 0.5} for s in range(50)],
    )
    policy = write_policy(
        tmp_path / "policy.yaml",
        """
        version: 1
        name: thresholds
        rules:
          - {id: loss-max, metric: loss, check: {max: 2}}
          - {id: loss-min, metric: loss, check: {min: 0}}
          - {id: grad-max, metric: grad_norm, check: {max: 1}}
        """,
    )
    return run, policy


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


def test_version_imports_no_more_than_the_cli_entry_point() -> None:
    gk = [m for m in _modules_after("from gatekeeper.cli.main import main\nmain(['--version'])")
          if m.startswith("gatekeeper")]
    assert gk == ["gatekeeper", "gatekeeper.cli", "gatekeeper.cli.main", "gatekeeper.registry"]


def test_a_threshold_check_imports_only_the_check_kinds_its_policy_names(tmp_path: Path) -> None:
    run, policy = _threshold_case(tmp_path)
    modules = _modules_after(_check(run, policy, "--quiet"))
    # the modules that define a kind (checks/<kind>.py), not shared bases (base, bound, ...)
    import importlib

    from gatekeeper.checks import Check
    from gatekeeper.registry import kinds_in

    kinds = [
        m
        for m in modules
        if m.startswith("gatekeeper.checks.") and kinds_in(importlib.import_module(m), Check)
    ]
    assert kinds == ["gatekeeper.checks.max", "gatekeeper.checks.min"]
    # --quiet prints no console report: neither it nor rich is imported, nor any heavy
    # dependency (httpx came with the Prometheus source kind), nor another command
    assert "gatekeeper.report.console" not in modules
    assert "rich" not in modules
    assert [m for m in HEAVY if m in modules] == []
    # a plain JSONL file: the detection pass asks the other families (their packages,
    # and the local ones' `accepts`), which read nothing and import no optional library
    # (sources/__init__.py), and the policy is read by libyaml (yamltree.py)
    families = {m.split(".")[2] for m in modules if m.startswith("gatekeeper.sources.")
                and m.count(".") >= 3 and not m.endswith(".scheme")}
    assert families <= {"jsonl", "tensorboard", "wandb"}
    assert [m for m in modules if m.startswith(("gatekeeper.sources.wandb.decode", "wandb",
                                                "mlflow", "httpx"))] == []
    assert "google.protobuf" not in modules
    commands = [m for m in modules if m.startswith("gatekeeper.cli.")]
    # (projectconfig: the project config is looked for; its schema only where one is found)
    assert commands == ["gatekeeper.cli.args", "gatekeeper.cli.check", "gatekeeper.cli.main",
                        "gatekeeper.cli.projectconfig", "gatekeeper.cli.report"]


def test_numpy_is_imported_with_one_blas_thread_and_the_environment_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    pytest.importorskip("threadpoolctl")  # reads the thread count of the loaded OpenBLAS
    run, policy = _threshold_case(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = _check(run, policy, "--quiet") + (
        "import os\n"
        "from threadpoolctl import threadpool_info\n"
        "blas = [p['num_threads'] for p in threadpool_info() if p['internal_api'] == 'openblas']\n"
        "print(blas, 'OPENBLAS_NUM_THREADS' in os.environ)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[1] False"


def test_the_console_report_is_imported_when_printed(tmp_path: Path) -> None:
    run, policy = _threshold_case(tmp_path)
    modules = _modules_after(_check(run, policy))
    assert {"gatekeeper.report.console", "rich"} <= set(modules)


def test_every_built_in_kind_lives_in_the_module_of_its_name() -> None:
    # so a policy's kind is imported on its own (CHECKS.get); the full list (`gatekeeper
    # checks`, the unknown-kind message) still names every one of them
    from gatekeeper.checks import CHECKS, registry

    modules = [m.name for m in pkgutil.iter_modules(gatekeeper.checks.__path__)]
    kinds = sorted(registry())
    assert set(kinds) <= set(modules)
    for kind in kinds:
        cls = CHECKS.get(kind)
        assert cls is not None and cls.kind == kind
        assert cls.__module__ == f"gatekeeper.checks.{kind}"
    assert CHECKS.get("base") is None and CHECKS.get("nope") is None


def test_an_unknown_kind_lists_every_kind(tmp_path: Path) -> None:
    run, _ = _threshold_case(tmp_path)
    policy = write_policy(tmp_path / "bad.yaml", """
        version: 1
        name: bad
        rules:
          - {id: r, metric: loss, check: {maxx: 1}}
        """)
    out = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "check", str(run), "-p", str(policy)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "GATEKEEPER_DEBUG": ""},
    )
    kinds = sorted(gatekeeper.checks.registry())
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"gatekeeper: error: {policy}:4: rules[0].check: unknown check 'maxx'; "
        f"known checks: {', '.join(kinds)}"
    )


def test_the_follow_default_interval_is_the_live_loops() -> None:
    # cli/live.py repeats the value so that parsing does not import the live loop
    from gatekeeper.cli.live import DEFAULT_INTERVAL
    from gatekeeper.live.loop import DEFAULT_INTERVAL as LOOP_DEFAULT

    assert DEFAULT_INTERVAL == LOOP_DEFAULT


def test_start_up_runs_without_the_collector_nor_pydantic_plug_ins_and_the_work_with_both(
    tmp_path: Path,
) -> None:
    # the program (main() without argv): the policies are built with the collector
    # paused and PYDANTIC_DISABLE_PLUGINS set, the run is read with the collector on and
    # the environment as given; another command runs with both restored (a trainer that
    # `gatekeeper run` starts inherits the user's environment); gatekeeper never turns
    # the collector on when the program had it off, nor touches a PYDANTIC_DISABLE_PLUGINS
    # the user set; main(argv) (a library call) leaves both alone
    run, policy = _threshold_case(tmp_path)
    code = (
        "import gc, os, sys\n"
        "import gatekeeper.gate as gate\n"
        "from gatekeeper.cli import checks as checks_cmd\n"
        "from gatekeeper.cli.main import main\n"
        "seen = []\n"
        "def state(what):\n"
        "    seen.append((what, gc.isenabled(), os.environ.get('PYDANTIC_DISABLE_PLUGINS')))\n"
        "load, read = gate.load, gate.read_run\n"
        "gate.load = lambda *a: state('load') or load(*a)\n"
        "gate.read_run = lambda *a: state('read') or read(*a)\n"
        "cmd = checks_cmd.cmd_checks\n"
        "checks_cmd.cmd_checks = lambda a: state('checks') or cmd(a)\n"
        f"sys.argv = ['gatekeeper', 'check', {str(run)!r}, '-p', {str(policy)!r}, '-q']\n"
        "assert main() == 0\n"
        "state('after')\n"
        "sys.argv = ['gatekeeper', 'checks']\n"
        "assert main() == 0\n"
        "gc.disable()\n"
        "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'mine'\n"
        "assert main() == 0\n"
        "state('after')\n"
        "gc.enable()\n"
        "del os.environ['PYDANTIC_DISABLE_PLUGINS']\n"
        f"assert main(['check', {str(run)!r}, '-p', {str(policy)!r}, '-q']) == 0\n"
        "print(seen)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == str([
        ("load", False, "__all__"), ("read", True, None), ("after", True, None),
        ("checks", True, None), ("checks", False, "mine"), ("after", False, "mine"),
        ("load", True, None), ("read", True, None),
    ])


def _program(run: Path, policy: Path, after: str = "") -> str:
    """`gatekeeper check` as the program runs it (main() reading sys.argv: its start-up),
    then `after`."""
    return (
        "import sys\n"
        f"sys.argv = ['gatekeeper', 'check', {str(run)!r}, '-p', {str(policy)!r}, '-q']\n"
        "from gatekeeper.cli.main import main\n"
        "assert main() == 0\n" + after
    )


def test_a_small_check_uses_pydantic_and_importlib_metadata_as_published(
    tmp_path: Path,
) -> None:
    # nothing of another package is shadowed in sys.modules (pydantic's plug-in loader is
    # its own), and a model built after start-up goes through it with
    # PYDANTIC_DISABLE_PLUGINS as the user set it (unset here)
    run, policy = _threshold_case(tmp_path)
    after = (
        "import pydantic\n"
        "class Later(pydantic.BaseModel):\n"
        "    x: int\n"
        "assert Later(x=1).x == 1\n"
        "loader = sys.modules['pydantic.plugin._loader']\n"
        "print(type(loader.__spec__.loader).__name__, loader.__file__.endswith('_loader.py'),"
        " 'PYDANTIC_DISABLE_PLUGINS' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", "import os\n" + _program(run, policy, after)],
                         cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "SourceFileLoader True False"


def test_a_threshold_check_as_the_program_imports_no_other_kind_nor_their_dependencies(
    tmp_path: Path,
) -> None:
    # the same as above, through the program's start-up: no anomaly kind (spike, trend,
    # history: their sliding windows), no bottleneck, no difflib (the
    # "did you mean" of an error), no expression parser (a policy without `expr:`), no
    # other command, no heavy dependency
    run, policy = _threshold_case(tmp_path)
    after = "import json\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", _program(run, policy, after)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    unwanted = {
        "gatekeeper.checks.spike", "gatekeeper.checks.trend", "gatekeeper.checks.history",
        "gatekeeper.checks.flat", "bottleneck", "scipy", "difflib",
        "gatekeeper.cli.serve", "gatekeeper.cli.history", "gatekeeper.cli.live",
        "gatekeeper.sources.jsonl.live", "gatekeeper.sources.jsonl.discover", "gatekeeper.expr",
        *HEAVY,
    }
    assert sorted(modules & unwanted) == []
