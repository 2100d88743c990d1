"""The HTML report opened in a real headless Chromium: it draws every failing rule with
its violation marker at the reported step, loads nothing, and runs no injected markup."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import gatekeeper
from tests.report.browser import CHARTS_JS, open_page
from tests.report.runs import HOSTILE, NAN_STEP, failing_run


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html")
    run, policy = failing_run(root)
    out = root / "report.html"
    proc = gatekeeper("check", str(run), "-p", str(policy), "--html", str(out),
                      "--json", str(root / "verdict.json"), "-q")
    assert proc.returncode == 1, proc.stderr
    return out


def test_report_draws_each_failing_rule_at_its_step(chromium, report: Path, tmp_path: Path):
    w = open_page(chromium, report.as_uri(), report.as_uri())
    charts = w.page.evaluate(CHARTS_JS)
    w.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert w.errors == [] and w.requests == []
    statuses = [c["status"] for c in charts]
    assert statuses[:6] == ["fail"] * 5 + ["error"], statuses  # failing first
    bad = [c for c in charts if c["status"] in ("fail", "error")]
    assert len(bad) == 6
    for c in bad:
        assert c["chart"] and c["series"] and c["mark"] and c["inside"], c
        assert abs(c["drawnX"] - c["expected"]) < 1.0, c
    steps = {c["id"]: c["step"] for c in bad}
    assert steps["FAILdemo/loss-spike"] == "12345"
    assert steps["ERRORdemo/grad-finite"] == str(NAN_STEP)


def test_report_escapes_names_and_filters(chromium, report: Path):
    w = open_page(chromium, report.as_uri(), report.as_uri())
    page = w.page
    # the hostile metric and description are shown as text, never run or loaded
    assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
    assert HOSTILE in page.locator("main").inner_text()
    assert "grpo-<b>bold</b>" in page.locator("h1").inner_text()
    page.uncheck("input[name=status][value=fail]")
    assert page.locator("section.rule.s-fail:visible").count() == 0
    assert page.locator("section.rule.s-error:visible").count() == 1
    page.check("input[name=status][value=fail]")
    page.fill("#f-metric", "LOSS")
    assert page.locator("section.rule:visible").count() == 2
    assert w.errors == [] and w.requests == []


def test_report_from_saved_verdict_matches(chromium, report: Path, tmp_path: Path):
    out = tmp_path / "again.html"
    proc = gatekeeper("report", str(report.parent / "verdict.json"),
                      "--run", str(report.parent / "run"), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    w = open_page(chromium, out.as_uri(), out.as_uri())
    charts = w.page.evaluate(CHARTS_JS)
    bad = [c for c in charts if c["status"] in ("fail", "error")]
    assert len(bad) == 6 and all(c["mark"] and abs(c["drawnX"] - c["expected"]) < 1 for c in bad)
    assert w.errors == [] and w.requests == []


def test_history_rule_draws_its_corridor(chromium, tmp_path: Path):
    from gatekeeper.engine import evaluate
    from gatekeeper.history import Baselines, RuleBaseline
    from gatekeeper.model import Run, Series
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.report import html
    from tests.helpers import write_policy

    policy = write_policy(tmp_path / "h.yaml", """
        version: 1
        name: h
        rules:
          - {id: drift, metric: train/loss, check: {history: 0.1}}
    """)
    values = [1.0] * 40
    values[30] = 1.5  # 50% above a reference of 1.0, outside the 10% corridor
    run = Run("r", "mem", series={"train/loss": Series.from_lists(
        "train/loss", range(40), values, "train/step")})
    base = Baselines({"h/drift": RuleBaseline({s: [1.0, 1.0] for s in range(40)}, False)}, "m")
    verdict = evaluate(load_policies([str(policy)]), run, history=base)
    (r,) = verdict.results
    assert r.step == 30 and r.violating_steps == (30,) and r.overlay is not None
    out = tmp_path / "history.html"
    html.write(verdict, str(out), run)
    w = open_page(chromium, out.as_uri(), out.as_uri())
    (c,) = w.page.evaluate(CHARTS_JS)
    assert c["mark"] and abs(c["drawnX"] - c["expected"]) < 1.0
    assert w.page.locator("polygon.corridor").count() == 1
    w.page.screenshot(path=str(tmp_path / "history.png"))
    assert w.errors == [] and w.requests == []
