"""`open_source`'s shortcut for a plain JSONL file (`sources._surely_jsonl`: no other
family imported) answers what asking every family in order answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import gatekeeper.sources as sources
from gatekeeper.sources.base import Source
from gatekeeper.sources.jsonl import JsonlSource


def _specs(root: Path) -> list[str]:
    row = '{"step": 0, "loss": 1.0}\n'
    files = [
        "run.jsonl", "a/b/run.jsonl", "wandb/run-1.jsonl", "wandb/offline-run-x.jsonl",
        "wandb/other.jsonl", "events.out.tfevents.1.host.jsonl", "logs/events.out.tfevents.2",
        "mlflow+x.jsonl", "prom+y.jsonl", "run.wandb", "run.json", "x/run-1.jsonl",
        "tb/events.out.tfevents.3.jsonl", "dir.jsonl/inner.jsonl", "weird name.jsonl",
    ]
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(row)
    (root / "emptydir.jsonl").mkdir()
    os.mkfifo(root / "fifo.jsonl")
    (root / "link.jsonl").symlink_to(root / "run.jsonl")
    specs = [str(root / name) for name in [*files, "emptydir.jsonl", "fifo.jsonl",
                                            "link.jsonl", "missing.jsonl", "dir.jsonl"]]
    specs += [os.path.relpath(s) for s in specs[:3]]
    specs += [f"file://{root}/run.jsonl", f"tb://{root}/run.jsonl", "wandb://e/p/r.jsonl",
              "mlflow+file:///x.jsonl", "prom+http://h:9090/x.jsonl", "mlflow://x.jsonl"]
    return specs


def _every_kind(spec: str) -> type[Source] | None:
    """What open_source answers by asking every kind in order."""
    for kind in sources.with_plugins(sources.source_kinds()):
        if kind.accepts(spec):
            return kind
    return None


def test_the_shortcut_answers_what_every_family_answers(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _specs(tmp_path)
    sure = []
    for spec in specs:
        monkeypatch.setattr(sources, "_built", {})  # as a fresh process: nothing built yet
        if sources._surely_jsonl(spec):
            sure.append(spec)
            assert _every_kind(spec) is JsonlSource, spec
            assert type(sources.open_source(spec)) is JsonlSource
    assert str(tmp_path / "run.jsonl") in sure and str(tmp_path / "link.jsonl") in sure
    assert len(sure) >= 6


def test_a_registered_kind_turns_the_shortcut_off(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 1.0}\n')

    class Mine(JsonlSource):
        kind = "mine"

    monkeypatch.setattr(sources, "_built", {})
    assert sources._surely_jsonl(str(run))
    monkeypatch.setitem(sources._built, "SOURCE_KINDS", [Mine, *sources.source_kinds()])
    assert not sources._surely_jsonl(str(run))
    assert type(sources.open_source(str(run))) is Mine


def test_a_new_family_package_turns_the_shortcut_off(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run.jsonl"
    run.write_text('{"step": 0, "loss": 1.0}\n')
    monkeypatch.setattr(sources, "_built", {})
    monkeypatch.setattr(sources, "_packages", lambda: [*sources._KNOWN, "newfamily"])
    assert not sources._surely_jsonl(str(run))


def test_families_and_kinds_are_built_when_first_used() -> None:
    import subprocess
    import sys

    from tests.helpers import REPO

    code = ("import sys, gatekeeper.sources as s\n"
            "before = [m for m in sys.modules if m.startswith('gatekeeper.sources.')]\n"
            "names = [f.name for f in s.FAMILIES]\n"
            "print(sorted(before), names, s.SOURCE_KINDS[-1].__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "['gatekeeper.sources.base', 'gatekeeper.sources.plugins'] "
        "['tensorboard', 'mlflow', 'prometheus', 'wandb', 'jsonl'] JsonlSource"
    )
