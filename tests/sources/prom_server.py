"""A real Prometheus (Debian's 2.42) for a test: its TSDB backfilled with its own
`promtool tsdb create-blocks-from openmetrics`, scraping what the config names."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.daemon.harness import free_port
from tests.helpers import wait_ready

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
MISSING = "needs Debian's prometheus: apt-get install -y prometheus"


@contextmanager
def prometheus(tmp: Path, openmetrics: str, scrape: list[dict[str, Any]] | None = None
               ) -> Iterator[str]:  # fmt: skip
    """Prometheus on a free loopback port, its history `openmetrics` (the text format,
    ending `# EOF`), scraping `scrape` (scrape_configs); yields its base URL."""
    assert PROMETHEUS is not None and PROMTOOL is not None, MISSING
    (tmp / "history.om").write_text(openmetrics)
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics",
                    str(tmp / "history.om"), str(tmp / "tsdb")],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": scrape or []}
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    with open(tmp / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{url}/-/ready", proc, 60, "prometheus did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
