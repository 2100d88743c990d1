"""Runs written by the real wandb SDK in offline mode, by child processes (see writer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WRITER = Path(__file__).with_name("writer.py")
REPO = Path(__file__).resolve().parents[2]


def sdk_env(root: Path) -> dict[str, str]:
    """An environment that keeps the SDK offline and away from the user's wandb settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_MODE="offline", WANDB_DIR=str(root), WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(root / ".config"), WANDB_CACHE_DIR=str(root / ".cache"),
        WANDB_DATA_DIR=str(root / ".data"), WANDB_ERROR_REPORTING="false",
    )
    return env


def start_writer(root: Path, steps: int, *extra: str) -> subprocess.Popen[str]:
    """Start writer.py in its own session, so it and its wandb-core can be killed together."""
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(steps), *extra],
        env=sdk_env(root), cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )


def write_run(root: Path, steps: int, *extra: str) -> Path:
    """Run writer.py to completion; returns the `wandb/` folder it wrote."""
    proc = start_writer(root, steps, *extra)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"writer failed ({proc.returncode}): {err[-2000:]}"
    return root / "wandb"


@pytest.fixture(scope="session")
def miles_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3000-step miles-shaped offline run (its `wandb/` folder)."""
    return write_run(tmp_path_factory.mktemp("miles"), 3000)


@pytest.fixture(scope="session")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 150-step run (a few 32 KiB blocks) that finished with exit code 3."""
    return write_run(tmp_path_factory.mktemp("failed"), 150, "--exit-code", "3")
