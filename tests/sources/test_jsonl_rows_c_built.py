"""The C rows reader is built, and taken, wherever a C compiler is present.

test_jsonl_rows_c.py skips as a whole when `gatekeeper.sources.jsonl._rows` cannot be
imported (an install without a compiler reads rows with the Python ways, the same
results). That skip must not hide a build that silently failed on a machine that has a
compiler: as for the wandb decoder and the spike and trend kernels
(test_wandb_history_c.py, test_spike_c.py, test_trend_c.py), this test requires the
extension there, built from the current `_rows.c`, and switched on.
"""

from __future__ import annotations

import importlib
import shutil
import sysconfig
from pathlib import Path

import pytest

from gatekeeper.sources.jsonl import reader


def test_extension_is_built_and_used_where_a_compiler_is() -> None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the Python ways are expected here")
    try:
        rows = importlib.import_module("gatekeeper.sources.jsonl._rows")
    except ImportError as exc:
        pytest.fail(f"gatekeeper.sources.jsonl._rows is not built ({exc}): scripts/bootstrap.sh")
    assert reader.USE_C
    source = Path(reader.__file__).with_name("_rows.c")
    built = Path(rows.__file__)
    assert built.stat().st_mtime >= source.stat().st_mtime, (
        f"{built.name} is older than _rows.c: rebuild (scripts/bootstrap.sh)"
    )
