"""The extras: `gatekeeper/extras.py`'s table matches pyproject.toml's, and a missing one is
one line naming the install command (the real install: tests/integrations/test_install.py)."""

from __future__ import annotations

import re
import sys
from importlib.metadata import packages_distributions

import pytest
import tomllib

from gatekeeper.errors import UsageError
from gatekeeper.extras import EXTRAS, MissingExtra, load, require
from tests.helpers import REPO

_PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
_OPTIONAL: dict[str, list[str]] = _PROJECT["optional-dependencies"]


def _name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return name.group(0).lower().replace("_", "-")


def test_every_extra_of_pyproject_is_in_the_table_and_installs_what_it_names() -> None:
    assert set(_OPTIONAL) - {"all", "test"} == set(EXTRAS)
    providers = packages_distributions()  # top-level module -> distributions (this venv)
    for extra, modules in EXTRAS.items():
        declared = {_name(r) for r in _OPTIONAL[extra]}
        for module in modules:
            dists = {_name(d) for d in providers.get(module.split(".")[0], [])}
            assert dists & declared, f"{module} of [{extra}] comes from {dists}, not {declared}"


def test_all_is_every_feature_but_the_trainer_callbacks_and_test_takes_all() -> None:
    (everything,) = _OPTIONAL["all"]
    named = set(re.fullmatch(r"gatekeeper\[(.*)\]", everything).group(1).split(","))  # type: ignore[union-attr]
    assert named == set(EXTRAS) - {"hf", "lightning"}
    assert "gatekeeper[all]" in _OPTIONAL["test"]
    core = {_name(r) for r in _PROJECT["dependencies"]}
    assert core == {"numpy", "bottleneck", "orjson", "pydantic", "pyyaml", "rich"}
    assert "plot" not in _OPTIONAL


def test_a_missing_module_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # import fails as if absent
    with pytest.raises(MissingExtra) as caught:
        load("google_crc32c", "tensorboard", "reading TensorBoard event files")
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    assert str(caught.value) == (
        "reading TensorBoard event files needs google_crc32c, which is not installed: "
        "pip install 'gatekeeper[tensorboard]'"
    )
    with pytest.raises(MissingExtra, match=r"needs no_such_module_gk, .*gatekeeper\[serve\]"):
        require("serve", "gatekeeper serve", ("no_such_module_gk",))
    require("serve", "gatekeeper serve")  # installed here: nothing raised


def test_another_import_failure_is_not_said_to_be_a_missing_extra() -> None:
    with pytest.raises(ModuleNotFoundError):  # not a module of the extra: a bug, shown as one
        load("gatekeeper.no_such_module", "wandb", "reading wandb runs")


def _extras_installed(containerfile: str) -> set[str]:
    text = (REPO / containerfile).read_text()
    (spec,) = re.findall(r'pip install [^\n]*"\.\[([a-z,]+)\]"', text)
    return set(spec.split(","))


def test_the_images_and_the_action_install_the_extras_they_need() -> None:
    daemon = _extras_installed("deploy/Containerfile")
    assert daemon == {"all"}  # serve, and every family a target may name
    cli = _extras_installed("deploy/cli/Containerfile")
    assert cli <= set(EXTRAS) and {"wandb", "tensorboard", "mlflow", "prometheus"} <= cli
    assert "serve" not in cli
    action = (REPO / "action.yml").read_text()
    default = re.search(r"\n  extras:\n(?:    .*\n)*?    default: (.*)\n", action)
    assert default is not None and set(default.group(1).split(",")) <= set(EXTRAS)
    assert "GK_EXTRAS: ${{ inputs.extras }}" in action
