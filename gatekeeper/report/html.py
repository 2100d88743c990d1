"""The HTML report: one self-contained file with the verdict, counts, filters and, per
rule, its series drawn against its bound (inline SVG), the message and where the rule is
declared. Opens offline: nothing is loaded (a Content-Security-Policy says so).

Everything quoted from input (run, metric, rule names, messages) is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from gatekeeper.model import Run, Series
from gatekeeper.report.files import write_atomic
from gatekeeper.report.html_assets import CSP, CSS, JS
from gatekeeper.report.html_series import Figure, figure, series_for
from gatekeeper.report.html_svg import svg
from gatekeeper.report.text import ORDER, ordered, step_text, summary_line, value_text
from gatekeeper.verdict import RuleResult, Status, Verdict


def rule_anchor(r: RuleResult, i: int) -> str:
    return f"rule-{i}"


def header(verdict: Verdict) -> str:
    run = verdict.run
    status = verdict.status.value
    link = ""
    if isinstance(run.get("url"), str) and run["url"].startswith(("http://", "https://")):
        link = f' · <a href="{escape(run["url"])}" rel="noopener">run page</a>'
    state = f" · state {escape(str(run['state']))}" if run.get("state") else ""
    counts = " ".join(
        f'<span class="c-{k}"><b>{n}</b> {k}</span>' for k, n in verdict.counts().items() if n
    )
    if verdict.overridden():
        counts += f' <span class="c-overridden"><b>{verdict.overridden()}</b> overridden</span>'
    return (
        f"<header><h1><span class=\"verdict v-{status}\">{status.upper().replace('_', ' ')}"
        "</span> "
        f"{escape(str(run.get('name', 'run')))}</h1>"
        f'<div class="meta">{escape(summary_line(verdict))}</div>'
        f'<div class="meta">source {escape(str(run.get("source", "-")))}{state}{link}</div>'
        f'<div class="counts">{counts}</div></header>'
    )


def filters(verdict: Verdict) -> str:
    present = {r.status for r in verdict.results}
    boxes = "".join(
        f'<label><input type="checkbox" name="status" value="{s.value}"'
        f'{"" if s is Status.SKIP else " checked"}> {s.value}</label>'
        for s in ORDER
        if s in present
    )
    policies = sorted({r.policy for r in verdict.results})
    options = "".join(f'<option value="{escape(p)}">{escape(p)}</option>' for p in policies)
    return (
        f'<nav class="filters">{boxes}'
        f'<label>policy <select id="f-policy"><option value="">all</option>{options}</select>'
        f'</label><label>metric <input id="f-metric" type="search" placeholder="filter">'
        f'</label><span id="f-shown" class="meta"></span></nav>'
    )


def rule_section(r: RuleResult, i: int, series: Series | None, chart: bool = True) -> str:
    st = r.status.value
    shadow = " (shadow)" if r.mode.value == "shadow" else ""
    shadow += " (overridden)" if r.override is not None else ""
    overridden = ' data-overridden="1"' if r.override is not None else ""
    rows = [
        ("metric", f"<code>{escape(r.metric)}</code>"),
        ("bound", escape(r.expected or "-")),
        ("reported", f"{escape(step_text(r))} · value {escape(value_text(r))}"),
        ("judged", _judged(r)),
        ("declared", f"<code>{escape(r.source)}</code>"),
    ]
    if r.override and r.override not in r.message:  # an off rule's message has the reason
        rows.append(("override", f'<span class="override">{escape(r.override)}</span>'))
    if r.description:
        rows.append(("why", escape(r.description)))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    body = _chart(r, series) if chart and r.status is not Status.SKIP else ""
    return (
        f'<section class="rule s-{st}" id="{rule_anchor(r, i)}" data-status="{st}" '
        f'data-policy="{escape(r.policy)}" data-metric="{escape(r.metric)}" '
        f'data-step="{"" if r.step is None else r.step}"{overridden}>'
        f'<h2><span class="badge b-{st}">{st.upper()}</span>{escape(r.policy)}/'
        f"{escape(r.rule)}{shadow}</h2>"
        f'<p class="msg">{escape(r.message)}</p><dl>{dl}</dl>{body}</section>'
    )


def _judged(r: RuleResult) -> str:
    span = f" over {escape(r.step_key or 'step')} {r.span[0]}..{r.span[1]}" if r.span else ""
    bad = f", {r.violations} violating" if r.violations else ""
    return f"{r.judged} point{'s' if r.judged != 1 else ''}{span}{bad}"


def legend(fig: Figure) -> str:
    """Name only what this chart draws."""
    parts = ["line: series"]
    if fig.band:
        parts.append("green: allowed band")
    if fig.corridor is not None:
        parts.append("green: trusted corridor · brown: reference")
    if any(line.label != "rolling median" for line in fig.lines):
        parts.append("dashed red: bound")
    if any(line.label == "rolling median" for line in fig.lines):
        parts.append("brown: rolling median")
    if fig.deadline:
        parts.append(f"orange: deadline ({fig.deadline[0]})")
    if fig.span:
        parts.append("blue shade: judged steps")
    if fig.marks:
        parts.append("red dots: violating points")
    if fig.nonfinite:
        parts.append("triangles: NaN/Inf")
    if fig.focus:
        parts.append("thin red line: reported step")
    return " · ".join(parts)


def _chart(r: RuleResult, series: Series | None) -> str:
    fig = figure(r, series)
    if fig.empty:
        return '<p class="nochart">no data for this metric in the run</p>'
    note = ""
    if fig.zoomed:
        note += " · zoomed to the judged steps"
    elif fig.total > fig.steps.size + len(fig.nonfinite):
        note = (
            f" · {fig.total} points drawn as {fig.steps.size} (envelope per pixel kept; "
            "every violating and non-finite point kept)"
        )
    return f'{svg(fig)}<div class="legend">{escape(legend(fig) + note)}</div>'


def render(verdict: Verdict, series: Mapping[str, Series] | None = None) -> str:
    """The whole page. Without `series` (the run was not available) rules have no chart."""
    run_series = dict(series or {})
    sections = "".join(
        rule_section(r, i, series_for(r, run_series), chart=series is not None)
        for i, r in enumerate(ordered(verdict.results))
    )
    title = f"gatekeeper: {verdict.status.value} — {verdict.run.get('name', 'run')}"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"{header(verdict)}{filters(verdict)}<main>{sections}</main>"
        f"<script>{JS}</script></body></html>\n"
    )


def write(verdict: Verdict, path: str, run: Run | None) -> None:
    write_atomic(path, render(verdict, run.series if run is not None else None).encode())
