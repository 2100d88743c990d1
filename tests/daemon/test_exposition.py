"""`/metrics` is sized by what an operator alerts on (issue 28): per run and per policy by
default, per rule and per metric only when the config asks, each status a number so a
series stays the same series when its status changes. A real `gatekeeper serve` is
scraped over HTTP and read with prometheus_client's own parser."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gatekeeper.daemon.exporter import STATUS_CODES, DaemonMetrics, RuleView, RunView
from tests.daemon.harness import DaemonProcess, write_config

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
RUN_FAMILIES = {"gatekeeper_run_status", "gatekeeper_policy_status", "gatekeeper_runs"}


def _scrape(daemon: DaemonProcess) -> Samples:
    text = daemon.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _state(samples: Samples) -> Samples:
    """The per-run and per-policy series (not the counters and histograms)."""
    return {k: v for k, v in samples.items() if k[0] in RUN_FAMILIES}


def _row(step: int, kl: float) -> str:
    return json.dumps({"train/step": step, "train/ppo_kl": kl, "train/loss": 1.0}) + "\n"


def _wait_for(daemon: DaemonProcess, key: tuple[str, tuple[tuple[str, str], ...]], value: float):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        samples = _scrape(daemon)
        if samples.get(key) == value:
            return samples
        time.sleep(0.2)
    raise AssertionError(f"{key} never became {value}: {_scrape(daemon)}; {daemon.tail()}")


def test_status_series_stay_the_same_when_a_run_turns_failing(tmp_path: Path) -> None:
    """A run passes, then its ppo_kl jumps: the same series (names and labels) are
    exported before and after, only their values move (1 pass -> 5 fail); no per-rule or
    per-metric series by default."""
    config = write_config(tmp_path)
    run = tmp_path / "runs" / "r.jsonl"
    run.write_text("".join(_row(s, 0.001) for s in range(3)))
    daemon = DaemonProcess(config).start()
    try:
        policy = ("gatekeeper_policy_status", (("policy", "kl"), ("run", "r")))
        before = _wait_for(daemon, policy, STATUS_CODES["pass"])
        assert before[("gatekeeper_run_status", (("run", "r"),))] == STATUS_CODES["pass"]
        with open(run, "a") as fh:
            fh.write(_row(3, 0.5))
        after = _wait_for(daemon, policy, STATUS_CODES["fail"])
        assert after[("gatekeeper_run_status", (("run", "r"),))] == STATUS_CODES["fail"]
        assert set(_state(before)) == set(_state(after))
        names = {name for name, _ in after}
        assert not names & {"gatekeeper_rule_status_code", "gatekeeper_metric_value"}
    finally:
        assert daemon.stop() == 0


def test_rule_and_metric_detail_are_opt_in(tmp_path: Path) -> None:
    """`metrics: {rules: true, values: true}`: one numeric status per rule (severity a
    label, status the value) and each metric's latest value and step."""
    config = write_config(tmp_path)
    settings = json.loads(config.read_text())
    config.write_text(json.dumps({**settings, "metrics": {"rules": True, "values": True}}))
    (tmp_path / "runs" / "r.jsonl").write_text(_row(0, 0.001) + _row(1, 0.5))
    daemon = DaemonProcess(config).start()
    try:
        key = (
            "gatekeeper_rule_status_code",
            (("policy", "kl"), ("rule", "kl-small"), ("run", "r"), ("severity", "fail")),
        )
        samples = _wait_for(daemon, key, STATUS_CODES["fail"])
        loss = (*key[1][:1], ("rule", "loss-finite"), *key[1][2:])
        assert samples[("gatekeeper_rule_status_code", loss)] == STATUS_CODES["pass"]
        value = ("gatekeeper_metric_value", (("metric", "train/ppo_kl"), ("run", "r")))
        assert samples[value] == 0.5
    finally:
        assert daemon.stop() == 0


def test_a_thousand_runs_expose_under_a_megabyte(tmp_path: Path) -> None:
    """1,000 runs x 45 rules in 10 policies: the default exposition stays under 1 MB
    (it was 7.3 MB with a series per rule and per metric)."""
    rules = tuple(
        RuleView(f"policy-{i % 10}", f"rule-{i}", "fail", "pass" if i % 7 else "fail")
        for i in range(45)
    )
    runs = [RunView(f"run-{n:04d}", "fail", 1.7e9, rules) for n in range(1000)]
    metrics = DaemonMetrics(CollectorRegistry(), lambda: runs)
    text, _ = metrics.exposition()
    assert len(text) < 1_000_000, len(text)
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    assert len(families["gatekeeper_policy_status"].samples) == 10_000
    assert families["gatekeeper_policy_status"].samples[0].value == STATUS_CODES["fail"]
    assert "gatekeeper_rule_status_code" not in families


def test_openmetrics_and_gzip_are_answered_as_prometheus_client_answers_them(
    tmp_path: Path,
) -> None:
    """Prometheus asks for OpenMetrics first: the state families come before its `# EOF`
    and parse with prometheus_client's OpenMetrics parser; gzip when asked; `name[]=`
    picks families."""
    config = write_config(tmp_path)
    (tmp_path / "runs" / "r.jsonl").write_text(_row(0, 0.001))
    daemon = DaemonProcess(config).start()
    try:
        key = ("gatekeeper_policy_status", (("policy", "kl"), ("run", "r")))
        _wait_for(daemon, key, STATUS_CODES["pass"])
        accept = "application/openmetrics-text; version=1.0.0"
        headers = {"Accept": accept, "Accept-Encoding": "gzip"}
        got = httpx.get(f"http://127.0.0.1:{daemon.port}/metrics", headers=headers)
        assert got.headers["content-encoding"] == "gzip"
        assert got.headers["content-type"].startswith("application/openmetrics-text")
        assert got.text.endswith("# EOF\n")
        families = {f.name: f for f in openmetrics_families(got.text)}
        assert families["gatekeeper_run_status"].samples[0].value == STATUS_CODES["pass"]
        assert "gatekeeper_polls" in families
        only = daemon.get("/metrics?name[]=gatekeeper_run_status").text
        assert [f.name for f in text_string_to_metric_families(only)] == ["gatekeeper_run_status"]
    finally:
        assert daemon.stop() == 0
