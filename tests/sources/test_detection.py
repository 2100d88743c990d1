"""`open_source`'s one detection pass (each family package answers for itself, the JSONL
fallback last) picks the kind that asking every source kind in the old fixed order
(tensorboard, mlflow, prometheus, wandb, then jsonl) picked, without importing what the
families that decline need."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import gatekeeper.sources as sources
from gatekeeper.sources.base import Source, SourceFamily
from gatekeeper.sources.jsonl import JsonlSource
from gatekeeper.sources.mlflow import MlflowSource
from gatekeeper.sources.prometheus import PrometheusSource
from gatekeeper.sources.tensorboard import TensorBoardSource
from gatekeeper.sources.wandb import WandbApiSource, WandbLocalSource
from tests.helpers import REPO

# The order `sources._ORDER` fixed before the detection pass replaced it.
_OLD_ORDER = (TensorBoardSource, MlflowSource, PrometheusSource, WandbApiSource,
              WandbLocalSource, JsonlSource)


def _specs(root: Path) -> list[str]:
    row = '{"step": 0, "loss": 1.0}\n'
    files = [
        "run.jsonl", "a/b/run.jsonl", "wandb/run-1.jsonl", "wandb/offline-run-x.jsonl",
        "wandb/other.jsonl", "events.out.tfevents.1.host.jsonl", "logs/events.out.tfevents.2",
        "mlflow+x.jsonl", "prom+y.jsonl", "run.wandb", "run.json", "x/run-1.jsonl",
        "tb/events.out.tfevents.3.jsonl", "dir.jsonl/inner.jsonl", "weird name.jsonl",
        "both/events.out.tfevents.4", "both/run-x.wandb",
    ]
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(row)
    (root / "emptydir.jsonl").mkdir()
    os.mkfifo(root / "fifo.jsonl")
    (root / "link.jsonl").symlink_to(root / "run.jsonl")
    specs = [str(root / name) for name in [*files, "emptydir.jsonl", "fifo.jsonl",
                                            "link.jsonl", "missing.jsonl", "dir.jsonl",
                                            "logs", "tb", "both", "wandb", "nowhere/wandb"]]
    specs += [os.path.relpath(s) for s in specs[:3]]
    specs += [f"file://{root}/run.jsonl", f"tb://{root}/run.jsonl", "wandb://e/p/r.jsonl",
              "mlflow+file:///x.jsonl", "prom+http://h:9090/x.jsonl", "mlflow://x.jsonl",
              "tensorboard://logs", "prom+https://h/x?selector={a=\"b\"}", "ftp://x/run"]
    return specs


def _old_answer(spec: str) -> type[Source] | None:
    return next((kind for kind in _OLD_ORDER if kind.accepts(spec)), None)


def _pass_answer(spec: str) -> type[Source] | None:
    family = sources.family_of(spec)
    kinds = family.sources if family is not None else ()
    return next((kind for kind in kinds if kind.accepts(spec)), None)


def test_the_detection_pass_answers_what_the_old_fixed_order_answered(tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    for spec in specs:
        assert _pass_answer(spec) is _old_answer(spec), spec
    picked = {_pass_answer(s) for s in specs}
    assert picked == {*_OLD_ORDER, None}  # every kind is somebody's answer, ftp:// nobody's
    assert type(sources.open_source(str(tmp_path / "run.jsonl"))) is JsonlSource
    with pytest.raises(sources.UsageError, match="cannot open source 'ftp://x/run'"):
        sources.open_source("ftp://x/run")


def test_families_are_asked_by_name_and_the_fallback_last() -> None:
    assert [f.name for f in sources.FAMILIES] == [
        "mlflow", "prometheus", "tensorboard", "wandb", "jsonl"]
    assert sources.SOURCE_KINDS[-1] is JsonlSource


def test_a_registered_kind_is_asked_before_every_family(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 1.0}\n')

    class Mine(JsonlSource):
        kind = "mine"

    monkeypatch.setattr(sources, "_registered", [])
    sources.register(Mine)
    assert type(sources.open_source(str(run))) is Mine
    assert sources.SOURCE_KINDS[0] is Mine


def test_a_new_family_package_is_asked_before_the_fallback(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A family without `claims` answers through its KIND's sources."""
    run = tmp_path / "run.csv"
    run.write_text("step,loss\n0,1.0\n")

    class Csv(Source):
        kind = "a .csv file"

        @classmethod
        def accepts(cls, spec: str) -> bool:
            return spec.endswith(".csv")

        def read(self) -> None:  # type: ignore[override]
            return None

    package = types.ModuleType("gatekeeper.sources.csv")
    package.KIND = SourceFamily(name="csv", examples=("r.csv",), sources=(Csv,))  # type: ignore[attr-defined]
    built = sources._family_packages()
    monkeypatch.setattr(sources, "_family_packages", lambda: (*built[:-1], package, built[-1]))
    assert type(sources.open_source(str(run))) is Csv
    assert type(sources.open_source(str(tmp_path / "run.jsonl"))) is JsonlSource


def test_a_jsonl_check_imports_no_other_familys_reader_nor_an_optional_library(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 1.0}\n')
    code = (f"import sys, gatekeeper.sources as s\nsrc = s.open_source({str(run)!r})\n"
            "src.read()\n"
            "print(type(src).__name__, sorted({m.split('.')[0] for m in sys.modules} & "
            "{'wandb', 'google', 'mlflow', 'httpx', 'sqlalchemy'}), sorted(m for m in "
            "sys.modules if m.startswith(('gatekeeper.sources.mlflow.', "
            "'gatekeeper.sources.prometheus.', 'gatekeeper.sources.wandb.decode')) and "
            "not m.endswith('.scheme')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "JsonlSource [] []"


def test_a_log_dir_of_runs_is_tensorboard_and_a_wandb_tree_of_copies_is_not(
    tmp_path: Path,
) -> None:
    """Lightning's `lightning_logs/version_N` (event files only below the SOURCE) is the
    TensorBoard family, so `check` can name its runs; wandb's `sync_tensorboard` copies
    under `wandb/run-*/files/` stay wandb's, and a folder with records of its own stays
    JSONL."""
    for name in ("ll/version_0", "ll/version_1", "w/wandb/run-1/files/tb", "j/sub"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "events.out.tfevents.1.host").write_bytes(b"")
    (tmp_path / "w/wandb/run-1/run-1.wandb").write_bytes(b"")
    (tmp_path / "j/m.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    assert _pass_answer(str(tmp_path / "ll")) is TensorBoardSource
    assert _pass_answer(str(tmp_path / "w/wandb")) is not TensorBoardSource
    assert _pass_answer(str(tmp_path / "w/wandb/run-1")) is WandbLocalSource
    assert _pass_answer(str(tmp_path / "j")) is JsonlSource
