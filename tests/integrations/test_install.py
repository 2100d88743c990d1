"""`pip install gatekeeper` with no extras, for real: the wheel built as the images build it,
installed into a fresh virtualenv (its core dependencies from PyPI, or from the wheel
directory in GATEKEEPER_WHEELHOUSE with no index), then the installed program run.

A JSONL run is gated (0 pass, 1 fail); a wandb run directory, a TensorBoard run, an
MLflow store, a Prometheus series and `serve` each stop with exit 2 and one line naming
the extra to install."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, write_policy

OPTIONAL = ("wandb", "google.protobuf", "google_crc32c", "mlflow", "sqlalchemy", "httpx",
            "apscheduler", "prometheus_client", "waitress", "psycopg", "ruamel")


# The children see only the venv: no PYTHONPATH to a checkout, no other virtualenv.
_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheelhouse = os.environ.get("GATEKEEPER_WHEELHOUSE")
    if not wheelhouse and not _pypi_reachable():
        pytest.skip("neither PyPI nor GATEKEEPER_WHEELHOUSE: no core dependencies to install")
    root = tmp_path_factory.mktemp("install")
    # what the images copy (deploy/*/Containerfile): the build writes its egg-info there,
    # not into the checkout
    src = root / "src"
    shutil.copytree(REPO / "gatekeeper", src / "gatekeeper",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"),
                    str(src)], check=True, timeout=300, capture_output=True, env=_ENV)
    (wheel,) = (root / "dist").glob("gatekeeper-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    # A bare venv, filled by this interpreter's pip (`--python`): no pip of its own to
    # install first (2 s), and no .pyc compiled ahead for every file of numpy, pydantic,
    # rich... (4.5 s); the modules the tests run compile as they are imported.
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120, env=_ENV)
    where = ["--no-index", "--find-links", wheelhouse] if wheelhouse else []
    subprocess.run([*pip, "--python", str(venv / "bin/python"), "install", "--no-compile",
                    *where, str(wheel)], check=True, timeout=300, capture_output=True, env=_ENV)
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([str(venv / "bin/gatekeeper"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_core_install_has_no_optional_library(core_venv: Path) -> None:
    code = ("import importlib.util as u\n"
            f"print([m for m in {OPTIONAL!r} if u.find_spec(m.split('.')[0]) is not None])\n")
    out = subprocess.run([str(core_venv / "bin/python"), "-c", code], capture_output=True,
                         text=True, timeout=60, cwd="/", env=_ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_core_install_gates_a_jsonl_run(core_venv: Path, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "loss.yaml", """
        version: 1
        name: health
        rules:
          - id: loss-bounded
            metric: loss
            check: {max: 5}
    """)
    good = tmp_path / "good.jsonl"
    good.write_text("".join(f'{{"step": {i}, "loss": {1.0 / (i + 1)}}}\n' for i in range(50)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 9.5}\n')
    passed = _run(core_venv, "check", str(good), "-p", str(policy), cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    failed = _run(core_venv, "check", str(bad), "-p", str(policy), cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "loss-bounded" in failed.stdout
    # a trainer followed live by `run` (the live tail, the final judgement)
    trainer = ("import json\nwith open('live.jsonl', 'w') as f:\n"
               "    for i in range(20): f.write(json.dumps({'step': i, 'loss': 1.0}) + '\\n')\n")
    live = _run(core_venv, "run", "-p", str(policy), "--source", str(tmp_path / "live.jsonl"),
                "--", str(core_venv / "bin/python"), "-c", trainer, cwd=tmp_path)
    assert live.returncode == 0, live.stdout + live.stderr


def _sources(root: Path) -> dict[str, list[str]]:
    run_dir = root / "wandb" / "offline-run-20260101_000000-abc"
    run_dir.mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(b"")
    tb = root / "tb" / "run-1"
    tb.mkdir(parents=True)
    (tb / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"")
    mlruns = root / "mlruns"
    mlruns.mkdir()
    policy = write_policy(root / "p.yaml", """
        version: 1
        name: p
        rules:
          - {id: r, metric: loss, check: {max: 5}}
    """)
    (root / "daemon.yaml").write_text("targets: []\n")
    check = ["check", "-p", str(policy)]
    return {
        "wandb": [*check, str(run_dir)],
        "tensorboard": [*check, str(tb)],
        "mlflow": [*check, f"mlflow+file://{mlruns}/runs/0123abcd"],
        "prometheus": [*check, 'prom+http://127.0.0.1:9/?selector={run="x"}'],
        "serve": ["serve", "-c", str(root / "daemon.yaml")],
    }


@pytest.mark.parametrize("extra", ["wandb", "tensorboard", "mlflow", "prometheus", "serve"])
def test_a_feature_of_an_extra_names_the_extra(core_venv: Path, tmp_path: Path,
                                               extra: str) -> None:
    out = _run(core_venv, *_sources(tmp_path)[extra], cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("gatekeeper: error: ")
    assert lines[0].endswith(f"is not installed: pip install 'gatekeeper[{extra}]'")
