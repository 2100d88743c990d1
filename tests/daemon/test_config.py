"""The daemon config: validation with file:line, secrets from the environment, --check-config."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gatekeeper.daemon.config import load_config
from gatekeeper.errors import ConfigError
from tests.helpers import REPO

POLICY = str(REPO / "policies" / "rl-health.yaml")


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_full_config_loads_with_durations_and_relative_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        state: state/gk.db
        poll: {{interval: 1m, jitter: 500ms, timeout: 10s}}
        targets:
          - glob: runs/*
            policies: [{POLICY}]
            tags: [nightly]
        notifiers:
          - {{name: team, kind: slack, url_env: SLACK_URL, repeat_interval: 4h}}
    """,
    )
    cfg = load_config(str(path))
    assert cfg.poll.interval == 60 and cfg.poll.jitter == 0.5
    assert cfg.state == str(tmp_path / "state" / "gk.db")
    assert cfg.targets[0].glob == str(tmp_path / "runs" / "*")
    assert cfg.notifiers[0].repeat_interval == 4 * 3600
    assert cfg.http.address == "127.0.0.1"
    n = cfg.notifiers[0]  # delivery defaults: a 10 s request deadline, retried for an hour
    assert (n.timeout, n.retry_for, n.retry_backoff, n.retry_backoff_max) == (10, 3600, 1, 60)
    assert (cfg.http.request_timeout, cfg.http.max_connections) == (10, 1024)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "poll: {interval: soon}\ntargets: [{source: x, policies: [p]}]\n",
            r"gatekeeper.yaml:1: poll.interval: .*duration like 30s.*got 'soon'",
        ),
        (
            "targets:\n  - source: x\n    glob: 'y/*'\n    policies: [p]\n",
            r"gatekeeper.yaml:2: targets\[0\]: .*exactly one of source:, glob: or wandb:",
        ),
        (
            "targets:\n  - source: x\n    policies: [p]\n    colour: red\n",
            r"gatekeeper.yaml:4: targets\[0\].colour: Extra inputs are not permitted",
        ),
        (
            "http: {address: 0.0.0.0}\ntargets: [{source: x, policies: [p]}]\n",
            r"gatekeeper.yaml:1: http.address 0.0.0.0 is not a loopback address; set http.token_e",
        ),
        ("targets: [{source: x, policies: [p]}\n", r"gatekeeper.yaml:2: invalid YAML"),
        (
            "targets:\n  - wandb: {project: just-a-project}\n    policies: [p]\n",
            r"gatekeeper.yaml:2: targets\[0\].wandb.project: expected ENTITY/PROJECT.*a-project",
        ),
        (
            "targets: [{source: x, policies: [p]}]\n"
            "notifiers:\n  - {name: n, kind: slack, url_env: U, retry_for: forever}\n",
            r"gatekeeper.yaml:3: notifiers\[0\].retry_for: .*duration like 30s.*'forever'",
        ),
        (
            "targets: [{source: x, policies: [p]}]\n"
            "notifiers:\n  - {name: n, kind: slack, url_env: U, retry_for: 30d}\n",
            r"notifiers\[0\].retry_for: Input should be less than or equal to 604800",
        ),
        (
            "targets: [{source: x, policies: [p]}]\n"
            "notifiers:\n  - {name: n, kind: slack, url_env: U, retries: 3}\n",
            r"gatekeeper.yaml:3: notifiers\[0\]: .*retries was replaced by retry_for",
        ),
        (
            "targets: [{source: x, policies: [p]}]\n"
            "notifiers:\n  - {name: n, kind: slack, url_env: U, timeout: 0s}\n",
            r"notifiers\[0\].timeout: Input should be greater than 0",
        ),
        (
            "targets: [{source: x, policies: [p]}]\n"
            "notifiers:\n  - {name: n, kind: slack, url_env: U, retry_backoff: 2m}\n",
            r"notifiers\[0\]: .*retry_backoff \(120s\) must not exceed retry_backoff_max \(60s\)",
        ),
        (  # exit 70 (an assertion at discovery) in --check-config and serve
            "targets: [{source: '', policies: [p]}]\n",
            r"gatekeeper.yaml:1: targets\[0\].source: String should have at least 1 character",
        ),
        (  # was the config's folder, every YAML file in it loaded as a policy
            "targets: [{source: x, policies: ['']}]\n",
            r"gatekeeper.yaml:1: targets\[0\].policies\[0\]: String should have at least 1",
        ),
        (
            "targets: [{glob: '', policies: [p]}]\n",
            r"gatekeeper.yaml:1: targets\[0\].glob: String should have at least 1 character",
        ),
        (  # was taken: a poll due at infinity
            "poll: {interval: .inf}\ntargets: [{source: x, policies: [p]}]\n",
            r"gatekeeper.yaml:1: poll.interval: .*expected a duration like 30s, 5m or 4h, got inf",
        ),
        (  # was the file /relative.db, in the root folder
            "state: sqlite://relative.db\ntargets: [{source: x, policies: [p]}]\n",
            r"gatekeeper.yaml:1: state: 'sqlite://relative.db': a SQLite URL names no host",
        ),
        (
            "http: {request_timeout: 10m}\ntargets: [{source: x, policies: [p]}]\n",
            r"gatekeeper.yaml:1: http.request_timeout: Input should be less than or equal to 300",
        ),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(str(write(tmp_path, body)))


@pytest.mark.parametrize(("target", "expected"), [
    ("{url: 'http://u:s3cret@[::1', selector: '{job=\"x\"}'}",
     "gatekeeper.yaml:2: targets[0].prometheus.url: Prometheus URL 'http://[::1': Invalid IPv6 "
     "URL; fix the host or port, got \"http://[::1\""),
    ("{url: 'http://u:s3cret@h:9090', selector: '{job=\"x\"}', late: soon}",
     "gatekeeper.yaml:2: targets[0].prometheus.late: expected a duration like 30s, 5m or 4h, "
     "got 'soon'"),
    ("{url: 'http://u:s3cret@h:9090', selector: 'job=x'}",
     "gatekeeper.yaml:2: targets[0].prometheus.selector: expected a label selector like "
     "{job=\"trainer\"}, got \"job=x\""),
])
def test_a_bad_prometheus_target_names_its_line_never_the_password(
    tmp_path: Path, target: str, expected: str
) -> None:
    """A malformed URL was taken (a ValueError at the first discovery); a value shown in a
    config error kept the URL's user:password@ (`quote` now drops it)."""
    body = f"targets:\n  - prometheus: {target}\n    policies: [p]\n"
    with pytest.raises(ConfigError) as caught:
        load_config(str(write(tmp_path, body)))
    assert expected in str(caught.value) and "s3cret" not in str(caught.value), caught.value


def test_state_and_address_can_be_overridden_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEKEEPER_STATE", "/var/lib/gk/state.db")
    monkeypatch.setenv("GATEKEEPER_HTTP_ADDRESS", "0.0.0.0")
    monkeypatch.setenv("GK_TOKEN", "t0ken")
    cfg = load_config(
        str(
            write(
                tmp_path,
                f"""
        http: {{token_env: GK_TOKEN}}
        targets: [{{source: x, policies: [{POLICY}]}}]
    """,
            )
        )
    )
    assert cfg.state == "/var/lib/gk/state.db" and cfg.http.address == "0.0.0.0"
    assert cfg.http.token() == "t0ken"


def serve_check(path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", "serve", "--check-config", "-c", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        cwd=REPO,
    )


def test_check_config_validates_policies_and_secrets(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        targets: [{{glob: "{tmp_path}/runs/*", policies: [{POLICY}]}}]
        notifiers:
          - {{name: lark, kind: lark, url_env: LARK_URL, secret_env: LARK_SECRET}}
    """,
    )
    done = serve_check(path, {"LARK_URL": "http://127.0.0.1:1/hook"})
    assert done.returncode == 2
    assert "notifier lark: environment variable LARK_SECRET is not set" in done.stderr
    done = serve_check(path, {"LARK_URL": "http://127.0.0.1:1/hook", "LARK_SECRET": "zq-secret-77"})
    assert done.returncode == 0, done.stderr
    assert "notifier lark: lark" in done.stdout and "state" in done.stdout
    assert "zq-secret-77" not in done.stdout + done.stderr  # secrets are never printed


def test_check_config_reports_a_bad_policy_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nname: x\nrules:\n  - id: r\n    metric: m\n    check: {abs_max: -1}\n"
    )
    path = write(tmp_path, f"targets: [{{source: x, policies: [{bad}]}}]\n")
    done = serve_check(path)
    assert done.returncode == 2 and "bad.yaml:6" in done.stderr
