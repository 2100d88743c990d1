"""What a chart is drawn from: downsampling keeps the envelope and every violating and
non-finite point; bounds come from the check's parameters; the HTML file stays small."""

from __future__ import annotations

import math
import re

import numpy as np

from gatekeeper.model import Series
from gatekeeper.report import html
from gatekeeper.report.html_series import DRAW_POINTS, figure
from gatekeeper.report.mermaid import label, xychart
from gatekeeper.verdict import Mode, RuleResult, Severity, Status, Verdict


def result(**kw) -> RuleResult:
    base = dict(policy="p", rule="r", status=Status.FAIL, severity=Severity.FAIL,
                mode=Mode.ENFORCE, metric="train/loss", message="m", source="p.yaml:3",
                step_key="train/step")
    return RuleResult(**{**base, **kw})


def long_series(n: int = 100_000) -> Series:
    rng = np.random.default_rng(1)
    values = rng.standard_normal(n)
    values[[1234, 55_555]] = np.nan
    values[77_777] = np.inf
    return Series("train/loss", np.arange(n, dtype=np.int64), values, "train/step")


def test_downsampling_keeps_every_violating_and_nonfinite_point_and_the_envelope():
    s = long_series()
    violating = (10, 20_001, 20_002, 99_999)  # ordinary values, not extremes
    r = result(step=10, value=float(s.values[10]), violating_steps=violating,
               check={"kind": "max", "value": 3.0}, span=(0, 99_999))
    fig = figure(r, s)
    assert fig.steps.size <= DRAW_POINTS + len(violating) + 4
    assert {m[0] for m in fig.marks} == set(violating)
    assert {st for st, _ in fig.nonfinite} == {1234, 55_555, 77_777}
    finite = s.values[np.isfinite(s.values)]
    assert fig.values.max() == finite.max() and fig.values.min() == finite.min()
    assert fig.lines[0].y == 3.0 and fig.total == 100_000


def test_bounds_from_check_parameters():
    s = Series.from_lists("m", range(10), [0.5] * 10)
    assert figure(result(check={"kind": "between", "lo": 0.1, "hi": 1}), s).band == (0.1, 1.0)
    assert figure(result(check={"kind": "abs_max", "value": 2}), s).band == (-2.0, 2.0)
    fig = figure(result(check={"kind": "reach", "value": 0.75, "by_step": 8}), s)
    assert fig.lines[0].y == 0.75 and fig.deadline == ("by step 8", 8)


def test_html_for_fifty_long_rules_stays_small():
    s = long_series()
    results = [result(rule=f"r{i}", metric="train/loss", step=10, violating_steps=(10,),
                      check={"kind": "max", "value": 3.0}, span=(0, 99_999)) for i in range(50)]
    page = html.render(Verdict(run={"name": "x"}, results=results), {"train/loss": s})
    assert len(page.encode()) < 3_000_000
    assert page.count('<svg class="chart"') == 50


def test_mermaid_text_is_inert_and_has_no_exponents():
    assert label('a`b"c<d>\n%%{init}%%') == "a_b_c(d)____init___"
    s = Series.from_lists("m", range(200), [1e-9 * math.sin(i) for i in range(200)])
    block = xychart(figure(result(check={"kind": "abs_max", "value": 1e-9}), s), "t`")
    assert block is not None and "e-" not in block and "```" not in block[3:-3]
    assert re.search(r'title "t_"', block)
