"""The optional C extensions are built, and taken, wherever a C compiler is present.

Each extension is optional (setup.py): an install without a compiler reads and judges
with the pure-Python/numpy paths, the same results, and the comparison tests of an
extension skip there (test_wandb_history_c.py, test_jsonl_rows_c.py skip as a whole).
That skip must not hide a build that silently failed on a machine that could have built
it: here, where a compiler is, each extension must import, be newer than its `.c`, and be
the path its module takes.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.helpers import require_built_extension


def _wandb_uses(built: object) -> None:
    from gatekeeper.sources.wandb import decode

    assert decode.USE_C and decode.c_decoder() is not None
    assert decode.c_decoder_status().startswith("C "), decode.c_decoder_status()


def _rows_uses(built: object) -> None:
    from gatekeeper.sources.jsonl import reader

    assert reader.USE_C and reader._c_module() is built
    assert reader.c_rows_status().startswith("C "), reader.c_rows_status()


def _spike_uses(built: object) -> None:
    from gatekeeper.checks import spike

    assert spike.USE_C and spike._spike is built


def _trend_uses(built: object) -> None:
    from gatekeeper.checks import trend

    assert trend.USE_C and trend._trend is built


@pytest.mark.parametrize(
    ("module", "user", "uses"),
    [
        ("gatekeeper.sources.wandb._history", "gatekeeper.sources.wandb.decode", _wandb_uses),
        ("gatekeeper.sources.jsonl._rows", "gatekeeper.sources.jsonl.reader", _rows_uses),
        ("gatekeeper.checks._spike", "gatekeeper.checks.spike", _spike_uses),
        ("gatekeeper.checks._trend", "gatekeeper.checks.trend", _trend_uses),
    ],
)
def test_extension_is_built_and_used_where_a_compiler_is(module: str, user: str, uses) -> None:  # type: ignore[no-untyped-def]
    source = Path(importlib.import_module(user).__file__ or "").with_name(
        module.rsplit(".", 1)[1] + ".c"
    )
    assert source.is_file(), source
    uses(require_built_extension(module, source))
