"""`gatekeeper import-recipe DOC.md`: the "What to expect" table (or the "What a healthy
run looks like" list) of a recipe doc as a policy, each rule citing the doc line it came
from. A cell it cannot read in full is listed, never guessed. The title comes from the
front matter's `title:` (else the first heading).

Rows: a metric column (`metric`, `signal`) whose cell names a metric, bare or in
backticks inside prose ("Step 0 `train/x`": a leading "Step N" is the step); a row that
names no metric (step time, peak memory) is refused. List items: a backticked metric, then
what is expected of it. An expected cell is read clause by clause (split at `,` and `;`);
each clause may end in `at step N`, `at eval@N`, `from rollout N`; a parenthesis is a
note, and the decimal numbers it cites (validated runs) widen the band to hold them, as
does the start of "the measured run went A to B" for the band at the clause before's step.
Unit words (nats, tokens) and `flat over training` / `no drift` (= every step) are read.

Expected cells (case-insensitive; NUM is a number, `–`, `-` or `to` join a range):
    NUM – NUM | between NUM and NUM | within NUM–NUM       -> between
    about NUM | ~NUM | ≈NUM | around NUM | roughly NUM     -> approx, rel = `about` setting
    NUM ± NUM | NUM +/- NUM                                -> approx, abs
    within NUM% of NUM | within NUM of NUM                 -> approx, rel / abs
    above|over|at least|>=|≥|> NUM                         -> min
    below|under|at most|<=|≤|< NUM                         -> max
    |x| below NUM                                          -> abs_max
    above NUM by step N | above NUM within N steps         -> reach (window from "K-step mean")
    rising by at least NUM by eval@N | by step N           -> rise from the clause before's step
A leading "stays"/"remains" is allowed. Step cells: `0`, `step 0`, `all`, `every step`,
`any`, `-`, empty, `A–B`, `steps A–B`, `from A`, `K-step mean` (reach only).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gatekeeper.toolkit.notation import NUMBER

NUM = rf"[-+]?{NUMBER}"
DASH = r"\s*(?:–|—|-|to)\s*"
_HASHES = re.compile(r"^(#{1,6})\s+")  # an ATX heading's opening; its text: `_heading`
_SECTION = re.compile(r"what to expect|what a healthy run looks like", re.I)
_METRIC = re.compile(r"^`?([A-Za-z0-9_.@/-]+)`?$")
_PROSE_METRIC = re.compile(r"^(?:step (\d+) )?`([A-Za-z0-9_.@/-]+/[A-Za-z0-9_.@/-]+)`$", re.I)
_BULLET = re.compile(r"^\s*[-*]\s+`([A-Za-z0-9_.@/-]+)`\s+(.*)$")


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


def _section(lines: list[str]) -> tuple[int, int]:
    """The line range under the first heading that says "What to expect" (or "What a
    healthy run looks like"), up to the next heading of its level or above."""
    level, start = None, 0
    for i, line in enumerate(lines):
        found = _heading(line)
        if found and level is not None and found[0] <= level:
            return start, i
        if found and level is None and _SECTION.search(found[1]):
            level, start = found[0], i + 1
    if level is None:
        raise RecipeDocError(
            "found no '## What to expect' heading (nor 'What a healthy run looks like')"
        )
    return start, len(lines)


def find_table(lines: list[str]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and (line number, cells) rows of the first table of the section, or of
    its bullet list as (metric, expected) rows."""
    start, end = _section(lines)
    for i in range(start, end):
        if lines[i].lstrip().startswith("|") and i + 1 < end and _is_rule(lines[i + 1]):
            rows = []
            for j in range(i + 2, end):
                if not lines[j].lstrip().startswith("|"):
                    break
                rows.append((j + 1, _cells(lines[j])))
            return [c.lower() for c in _cells(lines[i])], rows
    bullets = _bullets(lines, start, end)
    if bullets:
        return ["metric", "expected"], bullets
    raise RecipeDocError("found no table or list under 'What to expect'")


def _bullets(lines: list[str], start: int, end: int) -> list[tuple[int, list[str]]]:
    """Each list item (continuation lines joined) as [metric cell, rest]; an item that
    does not open with a backticked metric keeps its text as the metric cell, refused
    when read."""
    items: list[tuple[int, str]] = []
    for i in range(start, end):
        line = lines[i]
        if re.match(r"^\s*[-*]\s+", line):
            items.append((i + 1, line.strip()))
        elif items and line.startswith((" ", "\t")) and line.strip():
            n, text = items[-1]
            items[-1] = (n, f"{text} {line.strip()}")
        elif not line.strip() and items:
            continue
    out = []
    for n, text in items:
        m = _BULLET.match(text)
        out.append((n, [f"`{m.group(1)}`", m.group(2)] if m else [text[1:].strip(), ""]))
    return out


def _column(header: list[str], *names: str) -> int | None:
    for i, h in enumerate(header):
        if any(n in h for n in names):
            return i
    return None


class Unreadable(ValueError):
    """A cell outside the grammar; the message says which cell and why."""


def _n(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: no policy bound is past float64
        raise Unreadable(f"{text} is past the range of a float64")
    return value


def _tol(text: str) -> float:
    """A tolerance (± or within): above 0, or the policy language refuses it."""
    value = _n(text)
    if value <= 0:
        raise Unreadable(
            f"a tolerance of {text} allows nothing: give one above 0, or a bound (at most, "
            "between)"
        )
    return value


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
        return f"{{approx: {{value: {_f(_n(m.group(1)))}, abs: {_f(_tol(m.group(2)))}}}}}", None
    if m := re.fullmatch(rf"within ({NUM})(%?) of ({NUM})", t):
        tol, pct, value = _tol(m.group(1)), m.group(2), _n(m.group(3))
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
    for kind in ("reach", "rise"):
        if check.startswith("{" + kind):
            return kind
    if m := re.fullmatch(r"\[(\d+)\]", steps):
        return f"step{m.group(1)}"
    return steps if steps in ("all", "first", "last") else "steps"


def _metric_of(text: str) -> tuple[str, int | None]:
    """The metric a cell names, and the step of a leading "Step N"."""
    if m := _METRIC.match(text):
        return m.group(1), None
    if m := _PROSE_METRIC.match(text.strip()):
        return m.group(2), int(m.group(1)) if m.group(1) else None
    raise Unreadable(f"{text!r} names no logged metric (a name like `train/grad_norm`)")


_CLAUSE_STEP = re.compile(r"\s+(at|from|after)\s+(step|rollout|eval@)\s*(\d+)\s*$", re.I)
_EVERY_STEP = re.compile(r"(?:flat|stays flat|no drift|throughout)?(?: over training)?", re.I)
_RISE = re.compile(
    rf"ris(?:ing|es|e) by (?:at least |>= ?|≥ ?)?({NUM}) by (?:step (\d+)|eval@(\d+))", re.I
)
_MEASURED = re.compile(rf"(?:the )?(?:measured|validated) runs? went ({NUM}) to {NUM}", re.I)
_UNITS = re.compile(r"\s*\b(?:nats?|tokens?)\b", re.I)


def _eval_step(n: int, eval_every: int | None) -> int:
    if eval_every is None:
        raise Unreadable(
            f"'eval@{n}' is the {n}th evaluation: pass --eval-every ROLLOUTS (miles logs "
            "eval/step = the rollout id)"
        )
    return n * eval_every


def _clauses(text: str) -> list[tuple[str, list[float]]]:
    """The clauses of a cell, each with the decimal numbers its parentheses cite."""
    out = []
    for part in re.split(r"[;,](?![^(]*\))", text):
        notes = re.findall(r"\(([^)]*)\)", part)
        cited = [float(x) for note in notes for x in re.findall(r"\d*\.\d+", note)]
        clause = _UNITS.sub("", re.sub(r"\s*\([^)]*\)", "", part)).strip()
        if clause:
            out.append((clause, cited))
    return out


def _bounds(check: str) -> tuple[float, float] | None:
    if m := re.fullmatch(rf"\{{between: \[({NUM}), ({NUM})\]\}}", check):
        return float(m.group(1)), float(m.group(2))
    if m := re.fullmatch(rf"\{{approx: \{{value: ({NUM}), (rel|abs): ({NUM})\}}\}}", check):
        v, tol = float(m.group(1)), float(m.group(3))
        half = abs(v) * tol if m.group(2) == "rel" else tol
        return v - half, v + half
    return None


def _widened(check: str, cited: list[float]) -> str:
    """The doc's own validated values meet the doc: "~0.02 (0.0246 / 0.0247 in the two
    validated runs)" holds 0.0247 although 0.0247 is 23% above 0.02."""
    bounds = _bounds(check)
    if bounds is None or not cited or all(bounds[0] <= c <= bounds[1] for c in cited):
        return check
    lo, hi = min(bounds[0], *cited), max(bounds[1], *cited)
    return f"{{between: [{_f(round(lo, 12))}, {_f(round(hi, 12))}]}}"


def read_clause(
    text: str, steps: str, window: int | None, since: int, about: float, eval_every: int | None
) -> tuple[str, str] | None:
    """(steps, check) of one clause of an expected cell; None for "flat over training"
    (which says what `all` steps says); `since` is where a `rise` is measured from."""
    if _EVERY_STEP.fullmatch(text):
        return None
    if m := _CLAUSE_STEP.search(text):
        n = int(m.group(3))
        n = _eval_step(n, eval_every) if m.group(2).lower() == "eval@" else n
        word = m.group(1).lower()
        steps = f"[{n}]" if word == "at" else f"{{from: {n + (word == 'after')}}}"
        text = text[: m.start()]
    if m := _RISE.fullmatch(text.strip()):
        by = int(m.group(2)) if m.group(2) else _eval_step(int(m.group(3)), eval_every)
        rise = f"{{from_step: {since}, by_step: {by}, min: {_f(_n(m.group(1)))}}}"
        return "all", f"{{rise: {rise}}}"
    text = re.sub(r"^(?:rising|rises|then|falling|falls)\s+", "", text.strip(), flags=re.I)
    check, deadline = parse_expected(text, about)
    if deadline is not None:  # `check` is the reach value
        win = f", window: {window}" if window else ""
        return "all", f"{{reach: {{value: {check}, by_step: {deadline}{win}}}}}"
    if window is not None:
        raise Unreadable(f"a {window}-step mean is read only with 'above V by step N'")
    return steps, check


def read_row(
    cells: list[str], cols: dict[str, int | None], about: float, eval_every: int | None = None
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The (metric, steps, check) of each clause of one row it reads, and why each other
    clause was not read; Unreadable when it reads none."""

    def cell(name: str) -> str:
        i = cols[name]
        return cells[i] if i is not None and i < len(cells) else ""

    metric, at = _metric_of(cell("metric"))
    steps, window = parse_steps(cell("step"))
    steps = f"[{at}]" if at is not None else steps
    rules: list[tuple[str, str, str]] = []
    refused: list[str] = []
    since = at or 0
    for clause, cited in _clauses(cell("expected")):
        if m := _MEASURED.fullmatch(clause):  # where the measured run started meets the doc
            at_since = [i for i, r in enumerate(rules) if r[1] == f"[{since}]"]
            for i in at_since:
                rules[i] = (metric, rules[i][1], _widened(rules[i][2], [_n(m.group(1))]))
            if at_since:
                continue
        try:
            got = read_clause(clause, steps, window, since, about, eval_every)
        except Unreadable as exc:
            refused.append(str(exc))
            continue
        if got is not None:
            rules.append((metric, got[0], _widened(got[1], cited)))
            if m := re.fullmatch(r"\[(\d+)\]", got[0]):
                since = int(m.group(1))
    if not rules:
        raise Unreadable("; ".join(refused) or f"no expectation for {metric}")
    return rules, refused


def _front_title(lines: list[str]) -> str | None:
    if not lines or lines[0].strip() != "---":
        return None
    for line in lines[1:]:
        if line.strip() == "---":
            return None
        key, colon, value = line.partition(":")
        if colon and key == "title" and value.strip():
            return value.strip().strip("'\"")
    return None


def _heading(line: str) -> tuple[int, str] | None:
    r"""(level, text) of an ATX heading (`## What to expect ##`): the text without its
    closing hashes and spaces. String operations, not one regex: `(.*?)\s*#*\s*$` took
    seconds on a line of a few thousand spaces and hashes (backtracking)."""
    m = _HASHES.match(line)
    if m is None:
        return None
    return len(m.group(1)), line[m.end():].rstrip().rstrip("#").rstrip()


def import_recipe(text: str, about: float = 0.2, eval_every: int | None = None) -> Recipe:
    lines = text.splitlines()
    title = _front_title(lines) or next(
        (found[1] for line in lines if (found := _heading(line))), "recipe"
    )
    header, rows = find_table(lines)
    cols = {
        "metric": _column(header, "metric", "signal"),
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
            rules, refused = read_row(cells, cols, about, eval_every)
        except Unreadable as exc:
            out.not_read.append((line, raw, str(exc)))
            continue
        out.not_read += [(line, raw, why) for why in refused]
        for metric, steps, check in rules:
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
