"""A STAND-IN for the wandb server, for tests only: it is not wandb and implements no more
than the GraphQL operations the real `wandb.Api` client (through wandb-core) sends to read
one run — viewer, run, history keys, history pages — plus the `upsertBucket` mutation
annotation uses. A real wandb server cannot run in a test, so this answers from a fixture
run held in memory.

It counts what was asked (`ops`, `history_rows_served`, `history_requests`) so tests can
prove incremental polls fetch only new steps, and it can be told to misbehave:
`fail_next(status, times, retry_after)` answers 429/5xx, `hang_next(seconds)` holds the next
history page without answering. It listens on 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FixtureRun:
    """What the stand-in serves: one run's metadata and its history rows (`_step` each)."""

    entity: str
    project: str
    run_id: str
    name: str = ""
    state: str = "running"
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # {"key": {"value": ..., "desc": None}}
    summary: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def attrs(self) -> dict[str, Any]:
        keys: dict[str, Any] = {}
        for row in self.rows:
            for k in row:
                keys.setdefault(k, {"typeCounts": [{"type": "number", "count": 0}]})
        last = self.rows[-1]["_step"] if self.rows else -1
        return {
            "projectId": "1",
            "id": f"storage-{self.run_id}",
            "tags": list(self.tags),
            "name": self.run_id,
            "displayName": self.name or self.run_id,
            "sweepName": None,
            "state": self.state,
            "config": json.dumps(self.config),
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": "2026-01-01T00:00:00",
            "heartbeatAt": "2026-01-01T00:00:00",
            "description": None,
            "notes": None,
            "systemMetrics": "{}",
            "summaryMetrics": json.dumps(self.summary),
            "historyLineCount": len(self.rows),
            "user": {"name": "tester", "username": "tester"},
            "historyKeys": {"lastStep": last, "keys": keys},
        }


class StandinWandb:
    """The stand-in server; use as a context manager, point `WANDB_BASE_URL` at `.url`."""

    def __init__(self, run: FixtureRun):
        self.run = run
        self.lock = threading.Lock()
        self.ops: list[str] = []
        self.history_requests: list[tuple[int, int]] = []  # (minStep, maxStep) asked
        self.history_rows_served = 0
        self.mutations: list[dict[str, Any]] = []
        self.failures_served = 0
        self._failures: list[tuple[int, float | None]] = []
        self._hang_seconds = 0.0
        self._hang_ops: set[str] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandinWandb:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- misbehaviour -------------------------------------------------------------------

    def fail_next(self, status: int, times: int = 1, retry_after: float | None = None) -> None:
        with self.lock:
            self._failures.extend([(status, retry_after)] * times)

    def hang_next(self, seconds: float, ops: tuple[str, ...] = ("history",)) -> None:
        with self.lock:
            self._hang_seconds = seconds
            self._hang_ops = set(ops)

    # -- request handling ---------------------------------------------------------------

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        query = body.get("query", "")
        variables = body.get("variables") or {}
        op = _operation(query)
        with self.lock:
            self.ops.append(op)
            if self._failures:
                status, retry_after = self._failures.pop(0)
                self.failures_served += 1
                headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                return status, headers, {"errors": [{"message": f"stand-in {status}"}]}
            hang = self._hang_seconds if op in self._hang_ops else 0.0
            if hang:
                self._hang_seconds = 0.0
        if hang:
            time.sleep(hang)
        return 200, {}, {"data": self._data(op, query, variables)}

    def _data(self, op: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        run = self.run
        if op == "viewer":
            return {"viewer": {"id": "u1", "entity": run.entity, "username": "tester",
                               "email": None, "flags": "{}", "teams": {"edges": []}}}
        if op == "mutation":
            return self._mutate(variables)
        if not self._is_our_run(variables):
            return {"project": None}
        if op == "history":
            return {"project": {"run": {"history": self._history(variables)}}}
        return {"project": {"run": run.attrs()}}

    def _is_our_run(self, variables: dict[str, Any]) -> bool:
        run = self.run
        return (variables.get("entity"), variables.get("project"), variables.get("name")) == (
            run.entity, run.project, run.run_id,
        )

    def _history(self, variables: dict[str, Any]) -> list[str]:
        lo = int(variables.get("minStep", 0))
        hi = int(variables.get("maxStep", 1 << 62))
        limit = int(variables.get("pageSize") or variables.get("samples") or 500)
        rows = [r for r in self.run.rows if lo <= r["_step"] < hi][:limit]
        with self.lock:
            self.history_requests.append((lo, hi))
            self.history_rows_served += len(rows)
        return [json.dumps(r) for r in rows]

    def _mutate(self, variables: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.mutations.append(dict(variables))
        run = self.run
        if variables.get("tags") is not None:
            run.tags = list(variables["tags"])
        if variables.get("summaryMetrics") is not None:
            run.summary = json.loads(variables["summaryMetrics"])
        if variables.get("config") is not None:
            run.config = json.loads(variables["config"])
        return {"upsertBucket": {"bucket": run.attrs()}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/graphql":
                    self._send(200, {}, {})  # wandb-core telemetry; ignored
                    return
                status, headers, payload = standin.answer(json.loads(raw or b"{}"))
                self._send(status, headers, payload)

            def _send(self, status: int, headers: dict[str, str], payload: Any) -> None:
                out = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a hung answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        return Handler


def _operation(query: str) -> str:
    """A short name for a GraphQL document: viewer, run, history, historyKeys or mutation."""
    head = query.lstrip().removeprefix("#graphql").lstrip()
    if head.startswith("mutation"):
        return "mutation"
    if "history(" in query:
        return "history"
    if "viewer" in query and "project(" not in query:
        return "viewer"
    if "RunFragment" in query or "summaryMetrics" in query:
        return "run"
    if "historyKeys" in query:
        return "historyKeys"
    return "other"
