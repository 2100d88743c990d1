"""Benchmark: the HTML report for 50 rules over 100,000 steps — its size, the time Python
takes to write it, and the time Chromium takes to render it.

Builds a 100,000-step x 50-metric run in memory (noisy curves, a few spikes, a NaN, a
rule in five failing), judges it with a mix of checks (max, between, abs_max, spike,
reach), writes the report, then opens it in Debian's headless Chromium and measures from
navigation start to the second animation frame after `load` (layout and first paint of
every chart done), the median of a few opens.

Also the GitHub step summary with its Mermaid charts: its size against the 1 MiB limit.

Targets (issue #16): the file < 3 MB; render < 2 s.
Usage: python bench/bench_report.py [--steps N] [--metrics M] [--repeat R] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gatekeeper.engine import evaluate  # noqa: E402
from gatekeeper.model import Run, RunState, Series  # noqa: E402
from gatekeeper.policy.loader import load_policies  # noqa: E402
from gatekeeper.report import github, html  # noqa: E402

CHECKS = [
    "{{max: 3.0}}",
    "{{between: [-1, 3]}}",
    "{{abs_max: 3.0}}",
    "{{spike: {{window: 20, factor: 10}}}}",
    "{{reach: {{value: 0.2, by_step: 50000, window: 5}}}}",
]

# Time from navigation start until two frames after load: by then every SVG is laid out
# and painted.
RENDER_JS = """() => new Promise(done => requestAnimationFrame(() =>
  requestAnimationFrame(() => done(performance.now()))))"""


def make_run(steps: int, metrics: int) -> Run:
    rng = np.random.default_rng(0)
    s = np.arange(steps, dtype=np.int64)
    series = {}
    for i in range(metrics):
        base = 1.0 + 0.5 * np.exp(-s / (steps / 4)) + 0.05 * rng.standard_normal(steps)
        if i % 5 == 0:  # every fifth metric has a spike that breaks max/between/abs_max
            base[rng.integers(steps // 2, steps)] = 9.0
        if i == 7:
            base[steps // 3] = np.nan
        name = f"train/m{i:02d}"
        series[name] = Series(name, s, base, "train/step")
    return Run(name="bench-report", source="memory", state=RunState.FINISHED, series=series)


def policy_file(metrics: int, directory: str) -> str:
    rules = "".join(
        f"  - id: r{i:02d}\n    metric: train/m{i:02d}\n    check: "
        + CHECKS[i % len(CHECKS)].format()
        + "\n"
        for i in range(metrics)
    )
    path = os.path.join(directory, "bench.yaml")
    with open(path, "w") as fh:
        fh.write(f"version: 1\nname: bench\nrules:\n{rules}")
    return path


def render_times(path: str, repeat: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "report"))
    from browser import CHROMIUM_FLAGS, chromium_path  # the flags the tests use

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto("file://" + os.path.abspath(path), wait_until="load")
            out.append(page.evaluate(RENDER_JS) / 1000)
            assert page.locator("svg.chart").count() > 0
            page.close()
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="keep the report here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(args.steps, args.metrics)
        policies = load_policies([policy_file(args.metrics, tmp)])
        verdict = evaluate(policies, run, final=True)
        out = args.out or os.path.join(tmp, "report.html")
        t0 = time.perf_counter()
        html.write(verdict, out, run)
        write_s = time.perf_counter() - t0
        size = os.path.getsize(out)
        t0 = time.perf_counter()
        summary = github.step_summary(verdict) + github.chart_section(
            verdict, run, github.SUMMARY_LIMIT
        )
        summary_s = time.perf_counter() - t0
        renders = render_times(out, args.repeat)
    counts = verdict.counts()
    print(f"run: {args.metrics} metrics x {args.steps:,} steps; rules: "
          + ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    print(f"report size:  {size / 1e6:.2f} MB (target < 3 MB)")
    print(f"python write: {write_s:.2f} s (judging excluded)")
    print(f"step summary: {len(summary.encode()) / 1024:.1f} KiB with "
          f"{summary.count('```mermaid')} Mermaid charts in {summary_s:.2f} s (limit 1 MiB)")
    print(f"chromium render: median {statistics.median(renders):.2f} s over {len(renders)} "
          f"opens (min {min(renders):.2f}, max {max(renders):.2f}; target < 2 s)")


if __name__ == "__main__":
    main()
