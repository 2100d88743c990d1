"""docs/api.md is generated from the code: it must be current, and the guide's
examples must name only what exists."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO


def test_api_reference_is_current() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts/gen_api_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


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
