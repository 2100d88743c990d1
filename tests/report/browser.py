"""A real headless Chromium (Debian's package, never a downloaded build) driven through
Playwright, and what a test asserts about every page it opens: no console error, no
uncaught exception, no request that leaves the page."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CHROMIUM_FLAGS = [
    "--no-sandbox",  # root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        "chromium is not installed: `bash scripts/bootstrap.sh --test` installs Debian's package"
    )


@contextmanager
def launch() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="gatekeeper-chromium-")
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                profile, executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1100, "height": 900},
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Watched:
    """What a page did while it was open."""

    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def open_page(ctx: Any, url: str, allowed_prefix: str) -> Watched:
    """Open `url`, recording console errors, page errors and every request whose URL does
    not start with `allowed_prefix` (the page itself)."""
    page = ctx.new_page()
    w = Watched(page)
    page.on("console", lambda m: w.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: w.errors.append(str(exc)))
    page.on("dialog", lambda d: (w.errors.append(f"dialog: {d.message}"), d.dismiss()))
    page.on(
        "request",
        lambda r: None if r.url.startswith((allowed_prefix, "data:")) else w.requests.append(r.url),
    )
    page.goto(url, wait_until="load")
    return w


# For each failing/erroring rule section: its chart, the marker at the reported step, and
# where the axis mapping says that step lies (SVG user units).
CHARTS_JS = """() => Array.from(document.querySelectorAll('section.rule')).map(s => {
  const svg = s.querySelector('svg.chart');
  const step = s.dataset.step;
  const mark = svg && step !== '' &&
    svg.querySelector(`.mark[data-step="${step}"], .nonfinite[data-step="${step}"]`);
  let expected = null, drawnX = null, inside = false;
  if (svg && mark) {
    const d = svg.dataset, x0 = +d.x0, x1 = +d.x1, p0 = +d.px0, p1 = +d.px1;
    expected = p0 + (+step - x0) * (p1 - p0) / (x1 - x0);
    drawnX = mark.tagName === 'circle' ? +mark.getAttribute('cx')
      : mark.getBBox().x + mark.getBBox().width / 2;
    const m = mark.getBoundingClientRect(), c = svg.getBoundingClientRect();
    inside = m.width > 0 && m.left >= c.left - 1 && m.right <= c.right + 1 &&
      m.top >= c.top - 1 && m.bottom <= c.bottom + 1;
  }
  return {id: s.querySelector('h2').textContent, status: s.dataset.status, step,
    chart: !!svg, series: !!(svg && svg.querySelector('polyline.series')),
    mark: !!mark, expected, drawnX, inside, hidden: s.classList.contains('hidden')};
})"""
