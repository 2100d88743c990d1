"""The shipped multi-replica Kubernetes manifest: its config loads with the Secret's
environment and names a PostgreSQL state; replicas roll, a budget bounds disruption."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gatekeeper.daemon.config import load_config
from tests.daemon.test_deploy import localized
from tests.helpers import REPO

MANIFEST = REPO / "deploy" / "kubernetes" / "gatekeeper-replicas.yaml"


def test_the_replica_manifest_shares_a_postgres_state_and_rolls_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    secret = docs["Secret"]["stringData"]
    for key, value in secret.items():
        monkeypatch.setenv(key, value)
    config = load_config(str(localized(docs["ConfigMap"]["data"]["gatekeeper.yaml"], tmp_path)))
    assert config.state == secret["GATEKEEPER_STATE"] and config.state.startswith("postgresql://")
    assert config.http.token() == secret["GATEKEEPER_TOKEN"]
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] >= 2 and spec["strategy"]["type"] == "RollingUpdate"
    (container,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["GATEKEEPER_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert all("persistentVolumeClaim" not in v or v["name"] == "runs"
               for v in spec["template"]["spec"]["volumes"])  # fmt: skip
    pdb = docs["PodDisruptionBudget"]["spec"]
    assert pdb["selector"] == spec["selector"] and pdb["maxUnavailable"] == 1
    assert "[all]" in (REPO / "deploy" / "Containerfile").read_text()  # psycopg included
