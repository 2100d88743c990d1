"""Run `gatekeeper.cli.main` in-process on a case and check the promise every input gets:
a verdict (exit 0 or 1) or exit 2 with one stderr line naming the file (and the line, for
labelled cases) — never a traceback, never exit 70 (a bug), never slower than TIME_BOUND.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from pathlib import Path

from gatekeeper.cli.main import main
from tests.fuzz.gen import Case

TIME_BOUND = float(os.environ.get("GATEKEEPER_FUZZ_TIME_BOUND", "10"))
# How many cases each fuzz test runs: GATEKEEPER_FUZZ_SCALE=10 for a longer local session.
SCALE = float(os.environ.get("GATEKEEPER_FUZZ_SCALE", "1"))


# Where the seeds start: GATEKEEPER_FUZZ_SEED=100000 explores cases CI has not run.
FIRST_SEED = int(os.environ.get("GATEKEEPER_FUZZ_SEED", "0"))


def scaled(n: int) -> int:
    return max(1, int(n * SCALE))


def seeds(n: int) -> range:
    """The seeds of a test that runs `n` cases at scale 1."""
    return range(FIRST_SEED, FIRST_SEED + scaled(n))


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - start


def check_outcome(
    case: Case, path: Path, rc: int, err: str, seconds: float, out: str = ""
) -> None:
    """The assertions every fuzz case must pass; the message says how to reproduce.

    Exit 5 (nothing judged, e.g. every rule skipped on a short run) is a verdict too, but
    only with the verdict line saying so: `out` is the command's stdout.
    """
    where = f"{case.name} ({path})"
    assert seconds < TIME_BOUND, f"{where}: took {seconds:.1f} s"
    if rc == 5:
        assert out.startswith("gate NOTHING JUDGED"), f"{where}: exit 5 without a reason: {out!r}"
    assert rc in (0, 1, 2, 5), f"{where}: exit {rc}: {err}"
    if rc == 2:
        assert err.endswith("\n") and err.count("\n") == 1, f"{where}: not one line: {err!r}"
        assert err.startswith("gatekeeper: error: "), f"{where}: {err!r}"
        assert path.name in err, f"{where}: error does not name the file: {err!r}"
    else:
        assert err == "", f"{where}: a verdict with stderr output: {err!r}"
    if case.bad_lines is None:
        assert rc != 2 or not case.labelled, f"{where}: well-formed input refused: {err}"
        return
    assert rc == 2, f"{where}: malformed input was judged (exit {rc}); bad: {case.bad_lines}"
    if case.bad_lines != {0}:  # 0: the error names a byte offset, not a line
        lines = {int(n) for n in re.findall(rf"{re.escape(path.name)}:(\d+)", err)}
        assert lines & case.bad_lines, f"{where}: names lines {lines}, bad {case.bad_lines}: {err}"
