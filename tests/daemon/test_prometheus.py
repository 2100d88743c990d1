"""A real Prometheus (Debian's package) scrapes the daemon; rule status is queried back."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.daemon.harness import DaemonProcess, free_port, write_config, writer
from tests.helpers import REPO

RULES = REPO / "deploy" / "prometheus" / "gatekeeper-rules.yaml"
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs Debian's prometheus: apt-get install -y prometheus"
)


def start_prometheus(
    tmp: Path, target_port: int, rules: Path = RULES
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "gatekeeper",
                "scrape_interval": "500ms",
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "wb"),
    )
    return proc, f"http://127.0.0.1:{port}"


def query(base: str, expr: str) -> list[dict]:
    try:
        resp = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5)
        return resp.json()["data"]["result"] if resp.status_code == 200 else []
    except httpx.HTTPError:
        return []


def eventually(fn, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = fn()
        if out:
            return out
        time.sleep(0.25)
    return fn()


def alerts(base: str, name: str | None = None) -> list[dict]:
    found = httpx.get(f"{base}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return [a for a in found if name is None or a["labels"]["alertname"] == name]


@contextmanager
def scraped_daemon(
    tmp_path: Path, steps: int, rules: Path = RULES, config: Path | None = None
) -> Iterator[str]:
    """`gatekeeper serve` on a good and a bad run (ppo_kl 0.5 from step 2), scraped by a
    real Prometheus evaluating `rules`; yields Prometheus' base URL."""
    daemon = DaemonProcess(config or write_config(tmp_path)).start()
    kids = [
        writer(tmp_path / "runs" / "good.jsonl", "--steps", str(steps)),
        writer(tmp_path / "runs" / "bad.jsonl", "--steps", str(steps), "--bad-at", "2"),
    ]
    prom, base = start_prometheus(tmp_path, daemon.port, rules)
    try:
        yield base
    finally:
        prom.terminate()
        prom.wait(10)
        for kid in kids:
            kid.kill()
        daemon.stop()


def test_prometheus_scrapes_rule_status_and_evaluates_the_shipped_alert_rules(
    tmp_path: Path,
) -> None:
    with scraped_daemon(tmp_path, 8) as base:
        failing = eventually(lambda: query(base, "gatekeeper_policy_status == 5"))  # fail
        assert [(r["metric"]["run"], r["metric"]["policy"]) for r in failing] == [("bad", "kl")]
        passing = eventually(lambda: query(base, 'gatekeeper_policy_status{run="good"} == 1'))
        assert [r["metric"]["policy"] for r in passing] == ["kl"]
        runs = eventually(lambda: query(base, "gatekeeper_run_status == 5"))
        assert [r["metric"]["run"] for r in runs] == ["bad"]
        points = eventually(lambda: query(base, "gatekeeper_points_ingested_total >= 32"))
        assert float(points[0]["value"][1]) == 32  # 2 runs x 8 steps x 2 metrics
        rules = httpx.get(f"{base}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {g["name"] for g in rules} == {"gatekeeper-daemon", "gatekeeper-runs"}
        assert all(r["health"] == "ok" for g in rules for r in g["rules"])
        failing_alerts = eventually(lambda: alerts(base, "GatekeeperPolicyFailing"))
        assert [a["labels"]["run"] for a in failing_alerts] == ["bad"]


def test_rules_exported_from_the_policy_fire_on_the_daemons_metric_values(tmp_path: Path) -> None:
    """`gatekeeper export prometheus` of the daemon's own policy, loaded into a real
    Prometheus that scrapes `gatekeeper serve`: the daemon publishes the default names the
    exported rules read (gatekeeper_metric_value/_step{run, metric}), so the same policy
    fires in Prometheus on the bad run only, with the value and step the run logged."""
    config = write_config(tmp_path)
    settings = json.loads(config.read_text())
    config.write_text(json.dumps({**settings, "metrics": {"values": True}}))  # opt-in
    exported = tmp_path / "exported-rules.yml"
    out = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "export", "prometheus", str(tmp_path / "kl.yaml"),
         "-o", str(exported)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    with scraped_daemon(tmp_path, 6, exported, config) as base:
        steps = eventually(
            lambda: query(base, 'gatekeeper_metric_step{metric="train/ppo_kl"} == 5')
        )
        assert sorted(r["metric"]["run"] for r in steps) == ["bad", "good"]
        values = {
            r["metric"]["run"]: float(r["value"][1])
            for r in query(base, 'gatekeeper_metric_value{metric="train/ppo_kl"}')
        }
        assert values == {"good": 0.001, "bad": 0.5}
        firing = eventually(lambda: alerts(base, "GatekeeperKlKlSmall"))
        assert [(a["labels"]["run"], a["labels"]["gatekeeper_rule"]) for a in firing] == [
            ("bad", "kl-small")
        ]
        # 1/(step+1) is finite on both runs
        assert alerts(base, "GatekeeperKlLossFinite") == []
