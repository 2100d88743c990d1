"""Daemon discovery of TensorBoard runs (a log-dir glob) end to end: the daemon finds the
runs tensorboardX (2.6) writes, judges them, and finds a run that starts later."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.discovery import describe, lister
from gatekeeper.daemon.service import Daemon
from gatekeeper.errors import ConfigError
from gatekeeper.extras import MissingExtra
from tests.daemon.harness import POLICY, free_port
from tests.helpers import wait_until

tensorboardX = pytest.importorskip("tensorboardX")


def _write(logdir: Path, kl: list[float]) -> None:
    w = tensorboardX.SummaryWriter(str(logdir))
    for step, value in enumerate(kl):
        w.add_scalar("train/ppo_kl", value, step)
        w.add_scalar("train/loss", 1.0, step)
    w.close()


def _config(tmp: Path, target: dict) -> Path:
    (tmp / "kl.yaml").write_text(POLICY)
    path = tmp / "gk.yaml"
    path.write_text(json.dumps({
        "state": "state.db",
        "http": {"port": free_port()},
        "poll": {"interval": 0.3, "jitter": 0, "timeout": 10, "discovery_interval": 0.5},
        "targets": [{**target, "policies": ["kl.yaml"]}],
    }))
    return path


def test_a_target_has_one_kind(tmp_path: Path) -> None:
    path = _config(tmp_path, {"tensorboard": {"logdir": "logs/*"}, "glob": "x/*"})
    with pytest.raises(ConfigError, match="exactly one of"):
        load_config(str(path))


def test_tensorboard_logdir_runs_are_discovered_and_judged(tmp_path: Path) -> None:
    _write(tmp_path / "logs" / "good", [0.001] * 4)
    _write(tmp_path / "logs" / "sweep" / "bad", [0.001, 0.5, 0.001])  # a log dir of runs
    (tmp_path / "logs" / "empty").mkdir()
    config = load_config(str(_config(tmp_path, {"tensorboard": {"logdir": "logs/*"}})))
    target = config.targets[0]
    keys = lister(target)()
    assert keys == [
        f"tensorboard://{tmp_path / 'logs' / 'good'}",
        f"tensorboard://{tmp_path / 'logs' / 'sweep' / 'bad'}",
    ]
    assert "TensorBoard runs under" in describe(target)
    daemon = Daemon(config)
    daemon.start()
    watchers = lambda: {w.key: w for w in daemon.scheduler.snapshot()}  # noqa: E731
    try:
        assert wait_until(lambda: keys[1] in watchers() and watchers()[keys[1]].status == "fail")
        assert wait_until(lambda: watchers()[keys[0]].points == 8)
        assert watchers()[keys[0]].status in ("pass", "pending")
        _write(tmp_path / "logs" / "later", [0.001])
        assert wait_until(lambda: f"tensorboard://{tmp_path / 'logs' / 'later'}" in watchers())
    finally:
        daemon.stop()


def test_sources_command_lists_every_kind_with_an_example() -> None:
    from tests.helpers import gatekeeper

    proc = gatekeeper("sources")
    assert proc.returncode == 0, proc.stderr
    for example in ("tensorboard://", "mlflow+http://", "prom+http://", "wandb://", ".jsonl"):
        assert example in proc.stdout


def test_importing_the_cli_loads_no_optional_source_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gatekeeper.cli\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('mlflow', 'google_crc32c', 'tensorboardX', 'tensorboard', 'sqlalchemy')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("target", [
    {"tensorboard": {"logdir": "logs/*"}},
    {"source": "tensorboard://logs/run"},
])
def test_a_target_whose_extra_is_missing_stops_the_daemon_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: dict
) -> None:
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # as if not installed
    config = load_config(str(_config(tmp_path, target)))
    with pytest.raises(MissingExtra, match=r"pip install 'gatekeeper\[tensorboard\]'$"):
        lister(config.targets[0])
