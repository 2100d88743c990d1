"""Start the daemon as `gatekeeper serve` would, with the test tail source when the
project's live JSONL source is not available. Usage: python -m tests.daemon.launch FILE"""

from __future__ import annotations

import sys

import gatekeeper.sources as sources
from gatekeeper.cli import main

if __name__ == "__main__":
    if not hasattr(sources, "open_live_source"):
        from tests.daemon.sources import open_test_source

        sources.open_live_source = open_test_source  # type: ignore[attr-defined]
    sys.exit(main(["serve", "-c", sys.argv[1], *sys.argv[2:]]))
