"""Example runs for the toolkit tests, from the same generator as examples/runs/."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import REPO


def _examples() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_examples", REPO / "examples" / "make_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def healthy_runs(
    root: Path, seeds: range = range(1, 6), extra: dict[str, Any] | None = None
) -> list[Path]:
    """One miles-style run directory per seed; `extra` adds series (name -> fn(seed))."""
    mk = _examples()
    paths = []
    for seed in seeds:
        series = mk.healthy_series(seed)
        for name, make in (extra or {}).items():
            values = make(seed)
            if values is not None:
                series[name] = values
        path = root / f"healthy-{seed}"
        mk.write_record_dir(str(path), series, {"name": f"healthy-{seed}", "state": "finished"})
        paths.append(path)
    return paths


def reward_never_rises(root: Path) -> Path:
    mk = _examples()
    series = mk.healthy_series(11)
    series["rollout/raw_reward"] = 0.5 + np.random.default_rng(11).normal(0, 0.02, mk.STEPS)
    path = root / "flat-reward"
    mk.write_record_dir(str(path), series, {"name": "flat-reward", "state": "finished"})
    return path
