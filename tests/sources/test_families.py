"""Source families: one registered list, each family owning its kinds, annotator and
discovery, and the wandb SDK loaded only when a wandb run is read or listed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gatekeeper.sources import FAMILIES, SOURCE_KINDS, open_live_source, open_source
from gatekeeper.sources.base import Annotator, Discovery, LiveSource, SourceFamily
from gatekeeper.sources.jsonl import JsonlSource, LiveJsonlSource
from gatekeeper.sources.jsonl.discover import GlobRuns
from gatekeeper.sources.wandb import WandbApiSource, WandbLocalSource
from gatekeeper.sources.wandb.discover import ProjectRuns

# Every way in: the package, each family, opening a local run, the daemon's listing and
# the annotate dispatch. None of them may load the SDK.
_IMPORTS = (
    "import gatekeeper.sources, gatekeeper.sources.wandb, gatekeeper.sources.jsonl\n"
    "import gatekeeper.annotate, gatekeeper.daemon.discovery\n"
    "from gatekeeper.sources import open_source, open_live_source\n"
)


@pytest.mark.parametrize("extra", ["", "open_live_source('wandb://e/p/r')\n"])
def test_importing_sources_does_not_import_the_wandb_sdk(extra: str) -> None:
    code = _IMPORTS + extra + "import sys\nprint(sorted(m for m in sys.modules if m == 'wandb' "
    code += "or m.startswith('wandb.')))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_family_is_a_complete_descriptor() -> None:
    assert [f.name for f in FAMILIES] == ["mlflow", "prometheus", "tensorboard", "wandb", "jsonl"]
    for family in FAMILIES:
        assert isinstance(family, SourceFamily)
        assert family.examples and family.sources
        # Prometheus series belong to no run object a verdict could be written onto
        assert isinstance(family.annotator, Annotator) or family.name == "prometheus"
        assert family.target_key and family.discovery is not None
        assert all(issubclass(k, LiveSource) for k in family.live_sources)


def test_source_kinds_follow_the_family_order() -> None:
    assert SOURCE_KINDS[-3:] == [WandbApiSource, WandbLocalSource, JsonlSource]


def test_open_picks_the_family_by_spec(tmp_path) -> None:
    assert isinstance(open_source("wandb://team/proj/abc123"), WandbApiSource)
    assert isinstance(open_source(str(tmp_path / "r.jsonl")), JsonlSource)
    assert isinstance(open_live_source(str(tmp_path / "later.jsonl")), LiveJsonlSource)


def test_discoveries_describe_what_they_list(tmp_path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("")
    glob = GlobRuns(str(tmp_path / "*.jsonl"))
    assert isinstance(glob, Discovery)
    assert glob.runs() == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    wb = ProjectRuns("team/proj", "running", ("ci",))
    assert wb.query() == {"state": "running", "tags": {"$in": ["ci"]}}
    assert wb.describe() == "wandb project team/proj (state running, tags any of ci)"


def test_annotators_claim_their_runs(tmp_path) -> None:
    mlflow_family, _, tb_family, wandb_family, jsonl_family = FAMILIES
    assert tb_family.annotator and mlflow_family.annotator
    assert tb_family.annotator.accepts("tensorboard://runs/a")
    assert not tb_family.annotator.accepts(str(tmp_path / "r.jsonl"))
    assert mlflow_family.annotator.accepts("mlflow+http://127.0.0.1:5000/runs/abc")
    assert not mlflow_family.annotator.accepts("wandb://team/proj/abc")
    assert wandb_family.annotator and jsonl_family.annotator
    run_dir = tmp_path / "wandb" / "offline-run-20260101_000000-abc"
    run_dir.mkdir(parents=True)
    assert wandb_family.annotator.accepts("wandb://team/proj/abc")
    assert wandb_family.annotator.accepts(str(run_dir))
    assert not wandb_family.annotator.accepts(str(tmp_path / "r.jsonl"))
    assert jsonl_family.annotator.accepts(str(tmp_path / "r.jsonl"))
    assert not jsonl_family.annotator.accepts("mlflow://x")
