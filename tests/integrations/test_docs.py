"""docs/api.md is generated from the code: it must be current, and the guide's
examples must name only what exists."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.helpers import REPO


def test_api_reference_is_current(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`scripts/gen_api_docs.py --check`, in this process: the documented classes import
    torch, transformers and lightning (8 s in a child), which the trainer tests of this
    process have mostly imported already."""
    spec = importlib.util.spec_from_file_location("gen_api_docs", REPO / "scripts/gen_api_docs.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(sys, "argv", ["gen_api_docs.py", "--check"])
    assert script.main() == 0, capsys.readouterr().err


def test_bench_import_meets_its_target() -> None:
    """`import gatekeeper` under 150 ms, nothing heavy loaded (bench/bench_import.py)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_import
    finally:
        sys.path.pop(0)
    times = [bench_import.time_import("import gatekeeper") for _ in range(5)]
    assert all(t is not None and not t[1] for t in times)
    median = sorted(t[0] for t in times if t is not None)[2]
    assert median < bench_import.TARGET_MS, f"import gatekeeper took {median:.1f} ms"
