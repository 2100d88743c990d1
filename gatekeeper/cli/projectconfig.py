"""The project's gatekeeper settings: `[tool.gatekeeper]` in pyproject.toml or a
`gatekeeper.yaml`, so `gatekeeper check RUN` needs no `-p` in a configured repository.

Where (the first found wins):
1. `GATEKEEPER_CONFIG=FILE` (a .toml file: its `[tool.gatekeeper]` table, or the whole
   document when it has none; any other name is read as YAML);
2. else from the working directory upward, in each directory: `gatekeeper.yaml`, then a
   `pyproject.toml` holding a `[tool.gatekeeper]` table (one without it is passed over,
   as is a `gatekeeper.yaml` holding `targets:`, which is `gatekeeper serve`'s config).

What (docs/config.md): `policies` (as `-p`), `overrides` (each with its reason, as
`--override`), `reports` (`json`, `junit`, `html` paths, `github`, `color`). Paths are
relative to the file's directory. Flags win: `-p` replaces the policies and their
overrides, `--override` is applied after them, each report flag replaces its setting.
A file that cannot be used is exit 2, naming file:line and the fix.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from gatekeeper.errors import ConfigError, one_line
from gatekeeper.safe_open import open_regular
from gatekeeper.yamlfile import display_path

if TYPE_CHECKING:
    from gatekeeper.cli.configschema import ProjectConfig

ENV = "GATEKEEPER_CONFIG"
YAML_NAME = "gatekeeper.yaml"
TOML_TABLE = ("tool", "gatekeeper")
# a pyproject.toml that may hold the table; any other is passed over unparsed
_MAY_HOLD = re.compile(
    r"^\s*\[\[?\s*tool\s*(\.\s*gatekeeper\b|\])|^\s*tool\s*\.\s*gatekeeper\b", re.M
)


def discover(cwd: str | None = None) -> ProjectConfig | None:
    """The config `GATEKEEPER_CONFIG` names, else the nearest one up from `cwd`."""
    named = os.environ.get(ENV, "")
    if named:
        if not os.path.isfile(named):
            raise ConfigError(f"{ENV}={named}: no such file; point it at a pyproject.toml, "
                              f"a {YAML_NAME} or a .toml file, or unset it")
        found = read(named, required=True)
        assert found is not None  # required: a file without settings raised
        return found
    directory = os.path.abspath(cwd or os.getcwd())
    while True:
        for name in (YAML_NAME, "pyproject.toml"):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                found = read(path, required=False)
                if found is not None:
                    return found
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def read(path: str, *, required: bool) -> ProjectConfig | None:
    """The settings of one file; None (unless `required`) for a file that holds none."""
    shown = display_path(path)
    if path.endswith(".toml"):
        return _read_toml(path, shown, required)
    return _read_yaml(path, shown, required)


def _read_yaml(path: str, shown: str, required: bool) -> ProjectConfig | None:
    from gatekeeper.errors import PolicyError
    from gatekeeper.yamlfile import line_of, read_yaml, to_plain

    try:
        tree = read_yaml(path, "config")
        data = to_plain(tree, shown)
    except PolicyError as exc:  # a config's error (read_yaml names it a config)
        raise ConfigError(str(exc)) from None
    if isinstance(data, dict) and "targets" in data and not required:
        return None  # `gatekeeper serve -c gatekeeper.yaml`'s config, not this one
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}:1: a gatekeeper config is a mapping (policies:, "
                          "overrides:, reports:)")
    from gatekeeper.cli.configschema import build

    return build(data, shown, os.path.dirname(os.path.abspath(path)),
                  lambda loc: line_of(tree, loc))


def _read_toml(path: str, shown: str, required: bool) -> ProjectConfig | None:
    try:  # regular files only (a FIFO would block): the rule of every reader
        with open_regular(path, lambda why: ConfigError(f"{shown}: {why}")) as fh:
            raw = fh.read(1 << 20)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot be read: {exc.strerror or exc}") from None
    text = raw.decode("utf-8", errors="replace")
    if not required and not _MAY_HOLD.search(text):
        return None  # no gatekeeper table or key: not parsed (pip and the backend read it)
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = f"{m.group(1)}:" if m else ""
        why = one_line(str(exc).split(" (at line")[0])
        raise ConfigError(f"{shown}:{line} not valid TOML: {why}") from None
    found = _toml_table(doc, path, shown, required)
    if found is None:
        return None
    table, header = found
    if not isinstance(table, dict):
        at = _toml_line(text, header, ()) or _toml_line(text, ("tool",), ("gatekeeper",))
        raise ConfigError(f"{shown}:{at or 1}: tool.gatekeeper must be a table; write "
                          "[tool.gatekeeper] and its keys below it (docs/config.md)")
    from gatekeeper.cli.configschema import build

    return build(table, f"{shown} [tool.gatekeeper]" if header else shown,
                  os.path.dirname(os.path.abspath(path)),
                  lambda loc: _toml_line(text, header, loc), prefix=header, file=shown)


def _toml_table(doc: dict[str, Any], path: str, shown: str,
                required: bool) -> tuple[Any, tuple[str, ...]] | None:
    """The settings of a TOML document and where they are: `[tool.gatekeeper]`; else, in
    a file GATEKEEPER_CONFIG names that is no pyproject.toml, the whole document; else
    None (a pyproject.toml passed over) or, when it was named, an error."""
    tool = doc.get("tool")
    if isinstance(tool, dict) and "gatekeeper" in tool:
        return tool["gatekeeper"], TOML_TABLE
    if not required:
        return None
    if os.path.basename(path) == "pyproject.toml":
        raise ConfigError(f"{shown}: has no [tool.gatekeeper] table; add one "
                          "(docs/config.md) or point GATEKEEPER_CONFIG elsewhere")
    return doc, ()


def _toml_line(text: str, header: tuple[str, ...], loc: tuple[Any, ...]) -> int | None:
    """The line of `loc` inside the table `header` of a TOML text (tomllib keeps no
    marks): the key's line in the table's own section, or in a sub-table section
    (`[tool.gatekeeper.reports]`, the i-th `[[tool.gatekeeper.overrides]]`), else the
    line of the section it would be in."""
    lines = text.splitlines()

    def section(names: tuple[str, ...], nth: int = 0, array: bool = False) -> int | None:
        if not names:
            return 0
        dotted_names = r"\s*\.\s*".join(map(re.escape, names))
        pattern = re.compile(rf"^\[\[\s*{dotted_names}\s*\]\]" if array
                             else rf"^\[\s*{dotted_names}\s*\]")
        found = [i + 1 for i, ln in enumerate(lines) if pattern.match(ln)]
        return found[nth] if nth < len(found) else None

    def key_in(start: int, key: str) -> int | None:
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for i in range(start, len(lines)):
            if i > start and lines[i].startswith("["):
                return None
            if pattern.match(lines[i]):
                return i + 1
        return None

    top = section(header)
    if top is None or not loc:
        return top or None
    head, rest = loc[0], loc[1:]
    sub = section((*header, head))
    if sub is None and rest and isinstance(rest[0], int):
        sub = section((*header, head), rest[0], array=True)
        rest = rest[1:]
    if sub is not None:
        key = next((k for k in rest if isinstance(k, str)), None)
        return (key_in(sub, key) if key else None) or sub
    return key_in(top, head) or top or None


