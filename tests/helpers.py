"""Small, readable writers for the record files and policies tests need."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def wait_ready(url: str, proc: subprocess.Popen[Any], seconds: float, why: Any = "") -> None:
    """Until `url` answers 200 (a server the test started); RuntimeError when `proc` exits
    or `seconds` pass first, with `why()` (e.g. the server's log tail) when given."""
    import time

    import httpx

    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer: {why() if callable(why) else why}")
        time.sleep(0.2)


def marker(v: Any) -> Any:
    """A value as miles writes it: non-finite floats as "NaN"/"Infinity"/"-Infinity"."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def write_record(path: Path, metrics: Mapping[str, Iterable[tuple[int, Any]]]) -> Path:
    """A miles metric-history record: one line per metric with its [step, value] series."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for name, points in metrics.items():
            series = [[s, marker(v)] for s, v in points]
            fh.write(json.dumps({"metric": name, "series": series}) + "\n")
    return path


def write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Per-step rows, with Python's json (bare NaN/Infinity tokens, as a trainer writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(dict(row)) + "\n")
    return path


def write_meta(directory: Path, **meta: Any) -> Path:
    path = directory / "run.json"
    path.write_text(json.dumps(meta))
    return path


def write_policy(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def gatekeeper(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a child process."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def gatekeeper_in_process(*args: str, env: Mapping[str, str] | None = None
                          ) -> subprocess.CompletedProcess[str]:
    """`gatekeeper ARGS` through the console script's entry (`gatekeeper.cli.main.main`)
    in this process, in the environment `gatekeeper` gives a child (no GITHUB_*) plus
    `env`: for tests where a child process proves nothing more."""
    import pytest

    from tests.fuzz.harness import run_cli

    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("GITHUB_")]:
            mp.delenv(key)
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        code, out, err, _ = run_cli(list(args))
    return subprocess.CompletedProcess(["gatekeeper", *args], code, out, err)


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> bool:
    """Poll `pred` every `every` seconds until it is true or `timeout` passed; whether it
    was (asked once more at the end, so a slow last interval still counts)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(every)
    return bool(pred())
