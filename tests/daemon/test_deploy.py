"""The shipped deploy files: the example configs validate, probes and auth are wired."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from gatekeeper.daemon.config import load_config
from gatekeeper.daemon.service import Daemon
from tests.daemon.harness import write_config
from tests.daemon.sources import open_test_source
from tests.helpers import REPO

DEPLOY = REPO / "deploy"
ENV = {
    "GATEKEEPER_SLACK_URL": "http://127.0.0.1:1/s",
    "GATEKEEPER_LARK_URL": "http://127.0.0.1:1/l",
    "GATEKEEPER_LARK_SECRET": "x",
    "GATEKEEPER_WEBHOOK_URL": "http://127.0.0.1:1/w",
    "GATEKEEPER_TOKEN": "t",
}


def localized(text: str, tmp_path: Path) -> Path:
    """A shipped config with its /etc policy paths pointed at this checkout."""
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(text.replace("/etc/gatekeeper/policies", str(REPO / "policies")))
    return path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def test_example_config_and_kubernetes_configmap_load(tmp_path: Path, env: None) -> None:
    cfg = load_config(str(localized((DEPLOY / "gatekeeper.example.yaml").read_text(), tmp_path)))
    assert [n.kind for n in cfg.notifiers] == ["slack", "lark", "webhook"]
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "gatekeeper.yaml").read_text()))
    cm = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["gatekeeper.yaml"]
    k8s = load_config(str(localized(cm, tmp_path)))
    assert k8s.http.address == "0.0.0.0" and k8s.http.token() == "t"
    secret = next(d for d in docs if d["kind"] == "Secret")["stringData"]
    assert {k8s.http.token_env, *(n.url_env for n in k8s.notifiers)} <= set(secret)
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/var/lib/gatekeeper" in mounts and k8s.state.startswith("/var/lib/gatekeeper/")


def test_bearer_token_guards_metrics_and_api_but_not_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("T_TOKEN", "s3cret-token")
    path = write_config(tmp_path)
    text = path.read_text().replace('"http": {', '"http": {"token_env": "T_TOKEN", ')
    path.write_text(text)
    daemon = Daemon(load_config(str(path)), open_test_source)
    daemon.start()
    base = f"http://127.0.0.1:{daemon.http.port}"
    try:
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/metrics").status_code == 401
        assert (
            httpx.get(f"{base}/api/runs", headers={"Authorization": "Bearer nope"}).status_code
            == 401
        )
        ok = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200 and "gatekeeper_runs" in ok.text
    finally:
        daemon.stop()
