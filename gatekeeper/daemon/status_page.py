"""The daemon's status pages: `/` lists the watched runs with their status and a sparkline
per failing rule; `/runs/<key>` shows one run with the HTML report's per-rule plots.
Both refresh themselves and load nothing from elsewhere (same CSP as the report).

The daemon keeps verdicts, not series (a poll costs O(new points)), so a page reads the
series of the runs it draws from their sources. Reads are cached per run until its point
count changes, and only a bounded number of runs is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from html import escape
from typing import Any
from urllib.parse import quote, unquote

from gatekeeper.model import Series
from gatekeeper.report.html import filters, header, ordered, rule_section
from gatekeeper.report.html_assets import CSP, CSS, JS  # noqa: F401 - CSP: http.py sends it
from gatekeeper.report.html_series import figure, series_for
from gatekeeper.report.html_svg import svg
from gatekeeper.verdict import Status, Verdict

REFRESH_SECONDS = 30
CACHED_RUNS = 16
SPARK_POINTS = 120

SeriesReader = Callable[[str], dict[str, Series]]


def read_series(source: str) -> dict[str, Series]:
    """The run's whole series, read from its source (a file, directory or wandb URL)."""
    from gatekeeper.sources import open_source

    return open_source(source).read().series


class SeriesCache:
    """Series per run key, reread when the run's point count changes; LRU-bounded."""

    def __init__(self, reader: SeriesReader = read_series, size: int = CACHED_RUNS):
        self.reader, self.size = reader, size
        self._items: OrderedDict[str, tuple[Any, dict[str, Series]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, source: str, version: Any) -> dict[str, Series] | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] == version:
                self._items.move_to_end(key)
                return hit[1]
        try:
            series = self.reader(source)
        except Exception:  # a page must render even when a source is gone or unreadable
            return None
        with self._lock:
            self._items[key] = (version, series)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return series


class StatusPages:
    """Renders `/` and `/runs/<key>` from the daemon's API callables."""

    def __init__(
        self,
        runs: Callable[[], list[dict[str, Any]]],
        run: Callable[[str], dict[str, Any] | None],
        cache: SeriesCache | None = None,
        refresh: int = REFRESH_SECONDS,
    ):
        self.runs, self.run, self.refresh = runs, run, refresh
        self.cache = cache or SeriesCache()

    def _series(self, found: dict[str, Any]) -> dict[str, Series] | None:
        source = (found.get("verdict") or {}).get("run", {}).get("source") or found["key"]
        return self.cache.get(found["key"], source, found.get("points"))

    def index(self) -> bytes:
        rows = []
        for summary in sorted(self.runs(), key=_urgency):
            found = self.run(summary["key"]) or summary
            rows.append(self._row(found))
        body = (
            f"<header><h1>gatekeeper: {len(rows)} watched run{'s' if len(rows) != 1 else ''}"
            f'</h1><div class="meta">refreshes every {self.refresh} s</div></header><main>'
            '<table class="runs"><thead><tr><th>status</th><th>run</th><th>state</th>'
            "<th>failing rules</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table></main>"
        )
        return self._page("gatekeeper status", body)

    def _row(self, found: dict[str, Any]) -> str:
        status = str(found.get("status") or "pending")
        verdict = _verdict(found)
        failing = [r for r in verdict.results if r.status in (Status.FAIL, Status.ERROR)]
        series = self._series(found) if failing else None
        sparks = "".join(self._spark(r, series) for r in ordered(failing)[:8])
        more = f" +{len(failing) - 8} more" if len(failing) > 8 else ""
        href = "runs/" + quote(found["key"], safe="")
        state = "ended" if found.get("ended") else "live"
        url = verdict.run.get("url")
        link = (
            f' · <a href="{escape(url)}" rel="noopener">run page</a>'
            if isinstance(url, str) and url.startswith(("http://", "https://"))
            else ""
        )
        shown = escape(status.upper().replace("_", " "))  # NOTHING JUDGED
        return (
            f'<tr class="run" data-status="{escape(status)}"><td><span class="badge '
            f'b-{escape(status)}">{shown}</span></td><td><a href="{href}">'
            f"{escape(str(found.get('name') or found['key']))}</a>{link}</td>"
            f"<td>{state}, {found.get('points', 0)} points</td><td>{sparks}{more}</td></tr>"
        )

    def _spark(self, r: Any, series: dict[str, Series] | None) -> str:
        fig = figure(r, series_for(r, series) if series else None, points=SPARK_POINTS)
        # 32 px high: only the reported point is marked, the rest would be a red smear
        fig = replace(fig, marks=[m for m in fig.marks if m[0] == r.step])
        title = f"{r.policy}/{r.rule}: {r.message}"
        chart = "" if fig.empty else svg(fig, width=160, height=32, axes=False)
        return (
            f'<div class="sparkrow" data-rule="{escape(r.policy)}/{escape(r.rule)}" '
            f'title="{escape(title)}"><span class="badge b-{r.status.value}">'
            f"{r.status.value.upper()}</span> <code>{escape(r.policy)}/{escape(r.rule)}</code>"
            f'<span class="spark">{chart}</span></div>'
        )

    def run_page(self, ident: str) -> bytes | None:
        found = self.run(ident)
        if found is None:
            return None
        verdict = _verdict(found)
        series = self._series(found) or {}
        sections = "".join(
            rule_section(r, i, series_for(r, series))
            for i, r in enumerate(ordered(verdict.results))
        )
        back = '<nav class="filters"><a href="../">all runs</a></nav>'
        return self._page(
            f"gatekeeper: {found.get('name') or ident}",
            f"{header(verdict)}{back}{filters(verdict)}<main>{sections}</main>"
            f"<script>{JS}</script>",
        )

    def _page(self, title: str, body: str) -> bytes:
        return (
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta http-equiv="refresh" content="{int(self.refresh)}">'
            f"<title>{escape(title)}</title><style>{CSS}{SPARK_CSS}</style></head>"
            f"<body>{body}</body></html>\n"
        ).encode()


SPARK_CSS = """
.sparkrow{display:grid;grid-template-columns:68px minmax(180px,max-content) 160px;
align-items:center;gap:8px;margin:2px 0}
.sparkrow code{word-break:break-all}
.spark .chart{height:32px;width:160px}
.spark .chart .mark{r:2.5}
"""

_URGENCY = {"fail": 0, "error": 1, "nothing_judged": 2, "pending": 2, "pass": 3}


def _urgency(summary: dict[str, Any]) -> tuple[int, str]:
    return _URGENCY.get(str(summary.get("status")), 2), str(summary.get("name") or "")


def _verdict(found: dict[str, Any]) -> Verdict:
    data = found.get("verdict")
    if not isinstance(data, dict):
        return Verdict(run={"name": found.get("name")}, results=[], final=False)
    return Verdict.from_dict(data)



HTML = "text/html; charset=utf-8"


def add_routes(routes: Any, pages: StatusPages) -> None:
    """Register `/` and `/runs/<key>` on the daemon's route table (a `Routes` with
    `add(path, handler, auth=, prefix=)`, whose handlers answer with `h.send`/`h.json` and
    read `h.path`), behind the bearer token like `/api`."""

    def index(h: Any) -> None:
        h.send(200, pages.index(), HTML)

    def run(h: Any) -> None:
        body = pages.run_page(unquote(h.path[len("/runs/") :]))
        if body is None:
            h.json(404, {"error": "no such run"})
        else:
            h.send(200, body, HTML)

    routes.add("/", index, auth=True)
    routes.add("/runs/", run, auth=True, prefix=True)
