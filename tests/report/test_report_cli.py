"""`gatekeeper report` from a saved verdict, and `watch --html`, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import gatekeeper
from tests.report.runs import SPIKE_STEP, failing_run


def test_report_without_the_run_writes_a_page_without_charts(tmp_path: Path):
    run, policy = failing_run(tmp_path, steps=200)
    verdict = tmp_path / "v.json"
    assert gatekeeper("check", str(run), "-p", str(policy), "--json", str(verdict),
                      "-q").returncode == 1
    data = json.loads(verdict.read_text())
    data["run"]["source"] = str(tmp_path / "gone")  # the run is not where it was
    verdict.write_text(json.dumps(data))
    out = tmp_path / "r.html"
    proc = gatekeeper("report", str(verdict), "--html", str(out))
    assert proc.returncode == 0 and "so no plots" in proc.stdout
    page = out.read_text()
    assert "<svg" not in page and "demo/kl-step0" in page


def test_report_refuses_what_is_not_a_verdict(tmp_path: Path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    proc = gatekeeper("report", str(bad), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and "not a gatekeeper JSON verdict" in proc.stderr
    proc = gatekeeper("report", str(tmp_path / "missing.json"), "--html", str(tmp_path / "r"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr


def test_watch_writes_the_html_report_at_the_end(tmp_path: Path):
    run, policy = failing_run(tmp_path)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"event": "end", "state": "finished"}\n')
    out = tmp_path / "watch.html"
    proc = gatekeeper("watch", str(run), "-p", str(policy), "--interval", "0.1", "-q",
                      "--html", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f'class="mark" data-step="{SPIKE_STEP}"' in out.read_text()
