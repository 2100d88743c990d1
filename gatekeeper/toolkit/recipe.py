"""`gatekeeper import-recipe DOC.md`: the "What to expect" table of a recipe doc as a
policy, each rule citing the doc line it came from. A cell it cannot read in full is
listed, never guessed.

Expected cells (case-insensitive; NUM is a number, `–`, `-` or `to` join a range):
    NUM – NUM | between NUM and NUM | within NUM–NUM       -> between
    about NUM | ~NUM | ≈NUM | around NUM | roughly NUM     -> approx, rel = `about` setting
    NUM ± NUM | NUM +/- NUM                                -> approx, abs
    within NUM% of NUM | within NUM of NUM                 -> approx, rel / abs
    above|over|at least|>=|≥|> NUM                         -> min
    below|under|at most|<=|≤|< NUM                         -> max
    |x| below NUM                                          -> abs_max
    above NUM by step N | above NUM within N steps         -> reach (window from "K-step mean")
A leading "stays"/"remains" is allowed. Step cells: `0`, `step 0`, `all`, `every step`,
`any`, `-`, empty, `A–B`, `steps A–B`, `from A`, `K-step mean` (reach only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
DASH = r"\s*(?:–|—|-|to)\s*"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SECTION = re.compile(r"what to expect", re.I)
_METRIC = re.compile(r"^`?([A-Za-z0-9_.@/-]+)`?$")


@dataclass(frozen=True)
class Imported:
    rule_id: str
    metric: str
    steps: str  # YAML text
    check: str  # YAML text, flow style
    line: int
    cited: str  # the row as the doc wrote it


@dataclass
class Recipe:
    title: str
    rules: list[Imported] = field(default_factory=list)
    not_read: list[tuple[int, str, str]] = field(default_factory=list)  # line, row, why


class RecipeDocError(ValueError):
    """The doc has no table to read; the message says what was looked for."""


def _cells(line: str) -> list[str]:
    body = line.strip().strip("|")
    parts = re.split(r"(?<!\\)\|", body)
    return [p.replace("\\|", "|").strip() for p in parts]


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", line.strip()))


def find_table(lines: list[str]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and (line number, cells) rows of the first table under a heading that
    says "What to expect"."""
    level = None
    for i, line in enumerate(lines):
        m = _HEADING.match(line)
        if m and level is not None and len(m.group(1)) <= level:
            break
        if m and _SECTION.search(m.group(2)):
            level = len(m.group(1))
            continue
        if level is None or not line.lstrip().startswith("|"):
            continue
        if i + 1 < len(lines) and _is_rule(lines[i + 1]):
            rows = []
            for j in range(i + 2, len(lines)):
                if not lines[j].lstrip().startswith("|"):
                    break
                rows.append((j + 1, _cells(lines[j])))
            return [c.lower() for c in _cells(line)], rows
    where = "a '## What to expect' heading" if level is None else "a table under 'What to expect'"
    raise RecipeDocError(f"found no {where}")


def _column(header: list[str], *names: str) -> int | None:
    for i, h in enumerate(header):
        if any(n in h for n in names):
            return i
    return None


class Unreadable(ValueError):
    """A cell outside the grammar; the message says which cell and why."""


def _n(text: str) -> float:
    return float(text)


def _f(x: float) -> str:
    return repr(float(x))


def parse_steps(text: str) -> tuple[str, int | None]:
    """A step cell as YAML `steps:` text, and the window of a `K-step mean`."""
    t = text.strip().lower()
    if t in ("", "-", "—", "–", "all", "any", "every step", "all steps", "throughout"):
        return "all", None
    if t in ("first", "last"):
        return t, None
    if m := re.fullmatch(r"(?:step\s+)?(\d+)", t):
        return f"[{int(m.group(1))}]", None
    if m := re.fullmatch(rf"(?:steps\s+)?(\d+){DASH}(\d+)", t):
        a, b = int(m.group(1)), int(m.group(2))
        if a > b:
            raise Unreadable(f"step range {text!r} runs backwards")
        return f"{{from: {a}, to: {b}}}", None
    if m := re.fullmatch(r"(?:from|after|>=|≥)\s*(?:step\s+)?(\d+)", t):
        start = int(m.group(1)) + (1 if t.startswith("after") else 0)
        return f"{{from: {start}}}", None
    if m := re.fullmatch(r"(\d+)-step (?:rolling )?mean", t):
        return "all", int(m.group(1))
    raise Unreadable(f"step {text!r} is not a step, a range or `all`")


def parse_expected(text: str, about: float) -> tuple[str, int | None]:
    """An expected cell as a YAML check, and the deadline step of a `reach`."""
    t = re.sub(r"\s+", " ", text.strip().lower())
    t = re.sub(r"^(?:stays|remains|stays flat,?) ", "", t)
    if m := re.fullmatch(
        rf"(?:between )?({NUM}) (?:and|–|—|to) ({NUM})|(?:within )?({NUM}){DASH}({NUM})", t
    ):
        lo, hi = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if _n(lo) > _n(hi):
            raise Unreadable(f"range {text!r} runs backwards")
        return f"{{between: [{_f(_n(lo))}, {_f(_n(hi))}]}}", None
    if m := re.fullmatch(rf"(?:about|around|roughly|~|≈) ?({NUM})", t):
        return f"{{approx: {{value: {_f(_n(m.group(1)))}, rel: {_f(about)}}}}}", None
    if m := re.fullmatch(rf"({NUM}) ?(?:±|\+/-) ?({NUM})", t):
        return f"{{approx: {{value: {_f(_n(m.group(1)))}, abs: {_f(_n(m.group(2)))}}}}}", None
    if m := re.fullmatch(rf"within ({NUM})(%?) of ({NUM})", t):
        tol, pct, value = _n(m.group(1)), m.group(2), _n(m.group(3))
        key, tol = ("rel", tol / 100) if pct else ("abs", tol)
        return f"{{approx: {{value: {_f(value)}, {key}: {_f(tol)}}}}}", None
    if m := re.fullmatch(rf"\|x\| (?:below|under|at most|<=|≤|<) ?({NUM})", t):
        return f"{{abs_max: {_f(_n(m.group(1)))}}}", None
    if m := re.fullmatch(
        rf"(?:above|over|at least|>=|≥|>) ?({NUM}) (?:by step (\d+)|within (\d+) steps)", t
    ):
        return _f(_n(m.group(1))), int(m.group(2) or m.group(3))
    if m := re.fullmatch(rf"(?:above|over|at least|>=|≥|>) ?({NUM})", t):
        return f"{{min: {_f(_n(m.group(1)))}}}", None
    if m := re.fullmatch(rf"(?:below|under|at most|<=|≤|<) ?({NUM})", t):
        return f"{{max: {_f(_n(m.group(1)))}}}", None
    if re.fullmatch(NUM, t):
        raise Unreadable(f"a bare value {text!r} needs a tolerance word (about, ±, within)")
    raise Unreadable(f"{text!r} is not a value, range or bound this importer reads")


def _slug(metric: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", metric.lower()).strip("-")


def _suffix(steps: str, check: str) -> str:
    if check.startswith("{reach"):
        return "reach"
    if m := re.fullmatch(r"\[(\d+)\]", steps):
        return f"step{m.group(1)}"
    return steps if steps in ("all", "first", "last") else "steps"


def read_row(cells: list[str], cols: dict[str, int | None], about: float) -> tuple[str, str, str]:
    """(metric, steps, check) of one table row, or Unreadable."""

    def cell(name: str) -> str:
        i = cols[name]
        return cells[i] if i is not None and i < len(cells) else ""

    m = _METRIC.match(cell("metric"))
    if m is None:
        raise Unreadable(f"metric {cell('metric')!r} is not a metric name")
    steps, window = parse_steps(cell("step"))
    check, deadline = parse_expected(cell("expected"), about)
    if deadline is not None:  # `check` is the reach value
        win = f", window: {window}" if window else ""
        return m.group(1), "all", f"{{reach: {{value: {check}, by_step: {deadline}{win}}}}}"
    if window is not None:
        raise Unreadable(f"a {window}-step mean is read only with 'above V by step N'")
    return m.group(1), steps, check


def import_recipe(text: str, about: float = 0.2) -> Recipe:
    lines = text.splitlines()
    title = next((m.group(2) for line in lines if (m := _HEADING.match(line))), "recipe")
    header, rows = find_table(lines)
    cols = {
        "metric": _column(header, "metric"),
        "step": _column(header, "step", "when"),
        "expected": _column(header, "expect", "value", "target", "range"),
    }
    missing = [k for k in ("metric", "expected") if cols[k] is None]
    if missing:
        raise RecipeDocError(f"the table has no {' or '.join(missing)} column (header: {header})")
    out = Recipe(title)
    seen: dict[str, int] = {}
    for line, cells in rows:
        raw = lines[line - 1].strip()
        try:
            metric, steps, check = read_row(cells, cols, about)
        except Unreadable as exc:
            out.not_read.append((line, raw, str(exc)))
            continue
        rule_id = f"{_slug(metric)}-{_suffix(steps, check)}"
        seen[rule_id] = seen.get(rule_id, 0) + 1
        if seen[rule_id] > 1:
            rule_id += f"-{seen[rule_id]}"
        out.rules.append(Imported(rule_id, metric, steps, check, line, raw))
    return out


def render(recipe: Recipe, doc: str, name: str, match: dict[str, str]) -> str:
    lines = [f"# Imported by `gatekeeper import-recipe` from {doc}; each rule cites its line."]
    if recipe.not_read:
        lines.append("# Not interpreted (write these by hand, or reword the doc):")
        lines += [f"#   {doc}:{n}: {row}  -- {why}" for n, row, why in recipe.not_read]
    lines += [
        "version: 1",
        f"name: {name}",
        f"description: {_q(f'Expectations of {recipe.title} ({doc})')}",
    ]
    if match:
        lines.append("match:")
        lines.append("  config: {" + ", ".join(f"{k}: {_q(v)}" for k, v in match.items()) + "}")
    lines.append("rules:")
    for r in recipe.rules:
        lines += [
            f"  - id: {r.rule_id}",
            f"    description: {_q(f'{doc}:{r.line}: {r.cited}')}",
            f"    metric: {_q(r.metric)}",
            f"    steps: {r.steps}",
            f"    check: {r.check}",
        ]
    if not recipe.rules:
        lines.append("  []")
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)
