"""Machine-readable output of the toolkit commands (`lint`, `test`, `validate`):
`--output-format text|json|github`. A command turns what it found into `Item`s; this
module writes them as GitHub workflow-command annotations (`::error file=F,line=N,
title=T::message`, escaped as GitHub reads them) or as one JSON document.

Text stays each command's own; json and github are the same for all three."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from gatekeeper.report.github import _escape_data, _escape_prop

FORMATS = ("text", "json", "github")


@dataclass(frozen=True)
class Item:
    """One thing a command reports: a lint finding, a failing test case, a policy error."""

    level: str  # error | warning | notice (GitHub's annotation levels)
    title: str  # short: "gatekeeper lint GK004" or the test case's name
    message: str  # may span lines (a test's diff)
    file: str | None = None
    line: int | None = None
    code: str | None = None  # a lint rule code (GK001...), else None


def split_source(source: str) -> tuple[str, int | None]:
    """"path:line" (how rules and tests name where they are) as (path, line)."""
    path, _, tail = source.rpartition(":")
    return (path, int(tail)) if path and tail.isdigit() else (source, None)


_WHERE = re.compile(r"(?P<file>[^\s:][^:\n]*):(?P<line>\d+): ")


def where_of(exc: BaseException) -> tuple[str | None, int | None]:
    """The file and line an error names: its `file`/`line` when set, else the
    "path:line: " its message starts with (how every exit-2 error names its input)."""
    file, line = getattr(exc, "file", None), getattr(exc, "line", None)
    if file and line:
        return file, line
    m = _WHERE.match(str(exc))
    return (m["file"], int(m["line"])) if m else (file, line)


def annotation(item: Item) -> str:
    """The item as one workflow-command line (a multi-line message stays one line)."""
    props = [f"title={_escape_prop(item.title)}"]
    if item.file:
        where = [f"file={_escape_prop(item.file)}"]
        where += [f"line={item.line}"] if item.line is not None else []
        props = where + props
    return f"::{item.level} {','.join(props)}::{_escape_data(item.message)}"


def write_github(items: Iterable[Item], summary: str, out: TextIO) -> None:
    """Annotations first, then the command's one-line summary as plain log text."""
    for item in items:
        out.write(annotation(item) + "\n")
    out.write(summary + "\n")


def write_json(items: Iterable[Item], summary: dict[str, Any], out: TextIO) -> None:
    """One JSON document: the summary's fields plus `items`, each an Item's fields."""
    doc = {**summary, "items": [asdict(i) for i in items]}
    out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
