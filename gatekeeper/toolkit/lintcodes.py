"""Lint rule codes, `--select`/`--ignore`, and inline suppressions in policy YAML.

Every finding kind has a code (GK001...). A policy silences one on a rule with a comment
on any line of that rule (from its `- id:` line to the line before the next rule):

    - id: kl-tight  # gatekeeper: noqa GK004 -- the loose twin pages, this one gates

The reason after `--` is required: a suppression without one silences nothing and is
itself a finding (GK100), as is one naming a code that does not exist (GK101) and one
above the first rule of its file, which belongs to no rule (GK102). No codes
(`# gatekeeper: noqa -- reason`) silences every finding on the rule.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gatekeeper.errors import UsageError
from gatekeeper.toolkit.output import split_source

CODES = {
    "GK001": "never-fails",
    "GK002": "never-passes",
    "GK003": "never-applies",
    "GK004": "shadowed",
    "GK005": "far-threshold",
    "GK006": "fails-examples",
    "GK007": "not-logged",
    "GK100": "noqa-without-reason",
    "GK101": "noqa-unknown-code",
    "GK102": "noqa-outside-rule",
}
CODE_OF = {kind: code for code, kind in CODES.items()}
_NOQA = re.compile(r"#\s*gatekeeper:\s*noqa\b(?P<rest>.*)$", re.IGNORECASE)
_CODE = re.compile(r"GK\d+", re.IGNORECASE)


@dataclass(frozen=True)
class Suppression:
    file: str
    line: int
    codes: frozenset[str]  # empty: every code
    reason: str


def parse_codes(text: str | None, flag: str) -> list[str]:
    """`--select`/`--ignore` values: codes or code prefixes, comma-separated."""
    if not text:
        return []
    out = [c.strip().upper() for c in text.split(",") if c.strip()]
    for c in out:
        if not any(code.startswith(c) for code in CODES):
            known = ", ".join(f"{k} {v}" for k, v in CODES.items())
            raise UsageError(f"lint {flag}: {c} is no rule code or prefix of one (codes: {known})")
    return out


def wanted(code: str, select: list[str], ignore: list[str]) -> bool:
    """ruff's rule: selected (everything when nothing is) and not ignored."""
    chosen = not select or any(code.startswith(s) for s in select)
    return chosen and not any(code.startswith(i) for i in ignore)


def scan(path: str, text: str) -> list[Suppression]:
    """The noqa comments of one policy file, with their line numbers (1-based)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _NOQA.search(line)
        if m is None:
            continue
        codes_part, dashes, reason = m.group("rest").partition("--")
        codes = frozenset(c.upper() for c in _CODE.findall(codes_part))
        out.append(Suppression(path, n, codes, reason.strip() if dashes else ""))
    return out


@dataclass(frozen=True)
class Finding:
    source: str  # policy file:line of the rule (of the comment, for GK100/GK101)
    rule: str  # policy/rule
    kind: str  # a value of CODES
    message: str

    @property
    def code(self) -> str:
        return CODE_OF[self.kind]

    def __str__(self) -> str:
        return f"{self.source}: {self.code} {self.rule}: [{self.kind}] {self.message}"


def apply_suppressions(
    found: Iterable[Finding], starts: Iterable[str], texts: dict[str, str]
) -> tuple[list[Finding], int]:
    """(findings left, how many were silenced). `starts` are the rules' sources (file:line);
    a noqa comment belongs to the rule whose block holds its line."""
    by_file: dict[str, list[int]] = {}
    for s in starts:
        path, line = split_source(s)
        if line is not None:
            by_file.setdefault(path, []).append(line)
    owner: dict[str, list[Suppression]] = {}  # rule source -> its suppressions
    problems: list[Finding] = []
    for path, text in texts.items():
        lines = sorted(set(by_file.get(path, [])))
        for sup in scan(path, text):
            where = f"{path}:{sup.line}"
            i = bisect.bisect_right(lines, sup.line) - 1
            problems += _bad(sup, where)
            if i < 0:
                problems.append(Finding(where, "noqa", CODES["GK102"], (
                    "this suppression is above the file's first rule and belongs to none; "
                    "put it on a line of the rule it is for"
                )))
            elif sup.reason and not _unknown(sup):
                owner.setdefault(f"{path}:{lines[i]}", []).append(sup)
    kept, silenced = [], 0
    for f in found:
        hit = any(not s.codes or f.code in s.codes for s in owner.get(f.source, []))
        silenced += hit
        if not hit:
            kept.append(f)
    return kept + problems, silenced


def _unknown(sup: Suppression) -> list[str]:
    return sorted(c for c in sup.codes if c not in CODES)


def _bad(sup: Suppression, where: str) -> list[Finding]:
    out = []
    if not sup.reason:
        out.append(Finding(where, "noqa", CODES["GK100"], (
            "a suppression needs a reason: `# gatekeeper: noqa CODE -- why`; "
            "without one it silences nothing"
        )))
    if _unknown(sup):
        out.append(Finding(where, "noqa", CODES["GK101"], (
            f"{', '.join(_unknown(sup))}: no such rule code (codes: {', '.join(CODES)}); "
            "this suppression silences nothing"
        )))
    return out



def narrow(
    found: list[Finding],
    starts: list[str],
    texts: dict[str, str],
    select: list[str],
    ignore: list[str],
) -> tuple[list[Finding], int]:
    """What `lint` reports: suppressions applied, then --select/--ignore, in file order;
    and how many findings the suppressions silenced."""
    kept, silenced = apply_suppressions(found, starts, texts)
    kept = [f for f in kept if wanted(f.code, select, ignore)]
    return sorted(kept, key=lambda f: (*_place(f.source), f.code)), silenced


def _place(source: str) -> tuple[str, int]:
    path, line = split_source(source)
    return path, line or 0
