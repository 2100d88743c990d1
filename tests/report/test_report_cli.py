"""`gatekeeper report` from a saved verdict, and `watch --html`, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert proc.returncode == 2 and "not a gatekeeper JSON report" in proc.stderr
    proc = gatekeeper("report", str(tmp_path / "missing.json"), "--html", str(tmp_path / "r"))
    assert proc.returncode == 2 and "cannot read" in proc.stderr


@pytest.mark.parametrize("body", [
    '{"status": "fail", "run": {"name": "x"}, "results": ["a"]}',  # exit 70 (AttributeError)
    '{"status": "fail", "run": ["x"], "results": []}',
    '{"status": "fail", "run": {}, "results": [{"policy": "p", "rule": "r", "status": "fail",'
    ' "severity": "error", "mode": "enforce", "span": [0]}]}',  # IndexError
])
def test_report_and_notify_read_a_report_alike_and_refuse_one_of_another_shape(
    tmp_path: Path, body: str
) -> None:
    """One reader of JSON reports (`report/json_report.read`) for both commands; before,
    each had its own, and a result that is not an object was exit 70 in both."""
    bad = tmp_path / "x.json"
    bad.write_text(body)
    for argv in (("report", str(bad), "--html", str(tmp_path / "r.html")),
                 ("notify", str(bad), "--notify", "webhook:HOOK")):
        proc = gatekeeper(*argv, env={"HOOK": "http://127.0.0.1:9/hook"})
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.startswith(f"gatekeeper: error: {bad}: not a gatekeeper JSON "
                                      "report ("), proc.stderr
    assert not (tmp_path / "r.html").exists()


def test_watch_writes_the_html_report_at_the_end(tmp_path: Path):
    run, policy = failing_run(tmp_path)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"event": "end", "state": "finished"}\n')
    out = tmp_path / "watch.html"
    proc = gatekeeper("watch", str(run), "-p", str(policy), "--interval", "0.1", "-q",
                      "--html", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f'class="mark" data-step="{SPIKE_STEP}"' in out.read_text()
