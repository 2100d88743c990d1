"""The daemon's status pages in headless Chromium: behind the same bearer token as /api,
a sparkline per failing rule on `/`, the run page with per-rule plots, nothing loaded
from elsewhere, no console errors."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.daemon.harness import DaemonProcess, write_config
from tests.helpers import write_rows
from tests.report.browser import CHARTS_JS, open_page

TOKEN = "s3cret-token"


def _runs(root: Path) -> None:
    rows = [{"train/step": s, "train/ppo_kl": 0.5 if s >= 4 else 0.001, "train/loss": 1 / (s + 1)}
            for s in range(30)]
    write_rows(root / "bad-a.jsonl", [*rows, {"event": "end", "state": "finished"}])
    (root / "bad-a.meta.json").write_text(
        json.dumps({"name": "bad-a", "url": "https://wandb.example/e/p/runs/bad-a"}))
    good = [{**r, "train/ppo_kl": 0.001} for r in rows]
    write_rows(root / "healthy.jsonl", [*good, {"event": "end", "state": "finished"}])


def test_status_page_and_run_page(chromium, tmp_path: Path):
    config = write_config(tmp_path)
    data = json.loads(config.read_text())
    data["http"]["token_env"] = "T_TOKEN"
    config.write_text(json.dumps(data))
    _runs(tmp_path / "runs")
    daemon = DaemonProcess(config, {"T_TOKEN": TOKEN}).start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{daemon.port}/"
    try:
        def ended() -> bool:
            runs = httpx.get(base + "api/runs", headers=auth, timeout=5).json()["runs"]
            return len(runs) == 2 and all(r["ended"] for r in runs)

        assert daemon.wait(ended), daemon.tail()
        assert httpx.get(base, timeout=5).status_code == 401  # same rule as /api
        chromium.set_extra_http_headers(auth)  # the browser sends the token, like a proxy would
        w = open_page(chromium, base, base)
        page = w.page
        assert page.locator("tr.run").count() == 2
        first = page.locator("tr.run").first
        assert first.get_attribute("data-status") == "fail"  # the broken run on top
        spark = first.locator(".sparkrow[data-rule='kl/kl-small'] svg.chart")
        assert spark.count() == 1
        assert spark.locator(".mark[data-step='4']").count() == 1
        assert first.locator("a[href='https://wandb.example/e/p/runs/bad-a']").count() == 1
        refresh = page.locator("meta[http-equiv=refresh]").get_attribute("content")
        assert int(refresh) > 0
        page.screenshot(path=str(tmp_path / "status.png"))
        first.locator("a", has_text="bad-a").first.click()
        page.wait_for_load_state("load")
        assert "/runs/" in page.url
        charts = page.evaluate(CHARTS_JS)
        bad = [c for c in charts if c["status"] == "fail"]
        assert len(bad) == 1 and bad[0]["step"] == "4" and bad[0]["mark"], charts
        assert abs(bad[0]["drawnX"] - bad[0]["expected"]) < 1.0
        page.screenshot(path=str(tmp_path / "run.png"))
        assert w.errors == [] and w.requests == []
        page.close()
    finally:
        chromium.set_extra_http_headers({})
        daemon.stop()


def test_pages_register_on_a_route_table():
    """How the pages join a daemon whose HTTP server routes through a table."""
    from gatekeeper.daemon.status_page import StatusPages, add_routes

    class Table:
        def __init__(self) -> None:
            self.added: dict[str, tuple] = {}

        def add(self, path, handler, *, auth=True, prefix=False):
            self.added[path] = (handler, auth, prefix)

    class Handler:
        def __init__(self, path: str) -> None:
            self.path, self.sent = path, None

        def send(self, code, body, ctype, auth=False):
            self.sent = (code, body, ctype)

        def json(self, code, data, auth=False):
            self.sent = (code, data, "application/json")

    runs = [{"key": "/r/a.jsonl", "name": "a", "status": "pass", "points": 3}]
    pages = StatusPages(lambda: runs, lambda k: runs[0] if k in ("a", "/r/a.jsonl") else None,
                        refresh=5)
    table = Table()
    add_routes(table, pages)
    assert table.added["/"][1:] == (True, False) and table.added["/runs/"][1:] == (True, True)
    h = Handler("/")
    table.added["/"][0](h)
    assert h.sent[0] == 200 and b'href="runs/%2Fr%2Fa.jsonl"' in h.sent[1]
    h = Handler("/runs/%2Fr%2Fa.jsonl")
    table.added["/runs/"][0](h)
    assert h.sent[0] == 200 and b'content="5"' in h.sent[1]
    h = Handler("/runs/nope")
    table.added["/runs/"][0](h)
    assert h.sent[0] == 404
