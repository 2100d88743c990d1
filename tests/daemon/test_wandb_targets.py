"""A wandb project filter target: running runs with a tag are discovered, judged, retired.

The server is the wandb engineer's STAND-IN (tests/wandb/standin_server.py; a real wandb
server cannot run in a test), extended here to hold several runs and answer the project
`Runs` listing the real `wandb.Api().runs()` sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import POLICY, free_port
from tests.helpers import wait_until
from tests.wandb.standin_server import FixtureRun, StandinWandb


class ProjectStandin(StandinWandb):
    """The stand-in with many runs of one project, listed with state/tag filters."""

    def __init__(self, runs: list[FixtureRun]):
        super().__init__(runs[0])
        self.runs = {r.run_id: r for r in runs}
        self.listings = 0

    def _data(self, op: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        if "runs(" in query:
            return self._listing(json.loads(variables.get("filters") or "{}"))
        if op in ("viewer", "mutation"):
            return super()._data(op, query, variables)
        run = self.runs.get(variables.get("name", ""))
        if run is None:
            return {"project": None}
        if op == "history":
            lo, hi = int(variables.get("minStep", 0)), int(variables.get("maxStep", 1 << 62))
            rows = [json.dumps(r) for r in run.rows if lo <= r["_step"] < hi]
            return {"project": {"run": {"history": rows}}}
        return {"project": {"run": run.attrs()}}

    def _listing(self, filters: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.listings += 1
        tags = set(filters.get("tags", {}).get("$in", []))
        found = [
            r
            for r in list(self.runs.values())
            if r.state == filters.get("state", r.state) and (not tags or tags & set(r.tags))
        ]
        edges = [{"node": r.attrs(), "cursor": r.run_id} for r in found]
        return {
            "project": {
                "internalId": "1",
                "runCount": len(found),
                "readOnly": False,
                "runs": {"edges": edges, "pageInfo": {"endCursor": None, "hasNextPage": False}},
            }
        }


def kl_rows(n: int, bad_at: int | None = None) -> list[dict[str, Any]]:
    return [
        {
            "_step": i,
            "train/ppo_kl": 0.5 if bad_at is not None and i >= bad_at else 0.001,
            "train/loss": 1.0,
        }
        for i in range(n)
    ]


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProjectStandin]:
    runs = [
        FixtureRun("ent", "proj", "bad1", tags=["nightly"], rows=kl_rows(5, bad_at=2)),
        FixtureRun("ent", "proj", "untagged", tags=[], rows=kl_rows(5, bad_at=0)),
        FixtureRun("ent", "proj", "done", state="finished", tags=["nightly"], rows=kl_rows(5)),
    ]
    with ProjectStandin(runs) as server:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
        monkeypatch.setenv("WANDB_SILENT", "true")
        monkeypatch.setenv("GATEKEEPER_WANDB_RETRY_SECONDS", "2")
        yield server


def test_running_tagged_runs_are_discovered_judged_and_retired(
    tmp_path: Path, standin: ProjectStandin
) -> None:
    (tmp_path / "kl.yaml").write_text(POLICY)
    (tmp_path / "gk.yaml").write_text(
        json.dumps(
            {
                "state": "state.db",
                "http": {"port": free_port()},
                "poll": {
                    "interval": 0.3,
                    "jitter": 0,
                    "timeout": 10,
                    "discovery_interval": 0.5,
                    "workers": 2,
                },
                "targets": [
                    {"wandb": {"project": "ent/proj", "tags": ["nightly"]}, "policies": ["kl.yaml"]}
                ],
            }
        )
    )
    daemon = Daemon(load_config(str(tmp_path / "gk.yaml")))
    daemon.start()
    watchers = lambda: {w.key: w for w in daemon.scheduler.snapshot()}  # noqa: E731
    try:
        assert wait_until(lambda: watchers().get("wandb://ent/proj/bad1") is not None)
        bad = watchers()["wandb://ent/proj/bad1"]
        assert wait_until(lambda: bad.status == "fail" and bad.points == 10)
        assert set(watchers()) == {"wandb://ent/proj/bad1"}  # untagged and finished: not watched
        standin.runs["new"] = FixtureRun("ent", "proj", "new", tags=["nightly"], rows=kl_rows(3))
        assert wait_until(lambda: "wandb://ent/proj/new" in watchers())  # found without a restart
        standin.runs["new"].state = "finished"
        assert wait_until(lambda: watchers()["wandb://ent/proj/new"].ended)
        new = watchers()["wandb://ent/proj/new"]
        assert new.status == "pass" and new.points == 6
        assert not daemon.scheduler.scheduled("wandb://ent/proj/new")  # retired
    finally:
        daemon.stop()
