"""A real MLflow tracking server (sqlite backend, artifacts proxied), one per test session.

Started only when a test asks for it; loopback only. mlflow's first start creates the
schema (alembic migrations), which takes a while on a loaded machine: hence one server.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import free_port
from tests.helpers import wait_ready


@dataclass
class MlflowServer:
    url: str
    db: Path  # the sqlite backend store, also readable as mlflow+sqlite:///...

    def client(self):  # type: ignore[no-untyped-def]
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.url)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    pytest.importorskip("mlflow")
    exe = Path(sys.executable).with_name("mlflow")
    if not exe.exists() and shutil.which("mlflow") is None:
        pytest.skip("needs the mlflow server: pip install mlflow")
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    db = tmp / "mlflow.db"
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(
        [str(exe if exe.exists() else shutil.which("mlflow")), "server",
         "--backend-store-uri", f"sqlite:///{db}", "--artifacts-destination", str(tmp / "art"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
    )
    url = f"http://127.0.0.1:{port}"
    try:  # 240 s: schema migrations on a loaded 2-core machine
        wait_ready(f"{url}/health", proc, 240, lambda: (tmp / "server.log").read_text()[-2000:])
        yield MlflowServer(url, db)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextmanager
def json_server(answer: Callable[[str], Any]) -> Iterator[str]:
    """A loopback HTTP server that answers every GET with `answer(path)` as JSON: a
    service on the URL a user named that is not the tool gatekeeper expects there."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = json.dumps(answer(self.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
