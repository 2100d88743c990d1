"""`gatekeeper suggest RUN...`: derive bands from trusted runs.

Per metric, three selections, each judged the way the runs were:
- `first`: the common first step (`steps: [s]`): between the lowest and highest run value,
  widened by `k` robust sigmas of those values across runs (MAD x 1.4826);
- `all`: every point within the pooled q_lo..q_hi quantiles, widened by `frac` of that
  width, then stretched to every run's extremes: no input run can fail it;
- `late`: the mean of the last n points, between the runs' lowest and highest mean,
  widened by `k` robust sigmas across runs, or `k` standard errors of that mean (the runs'
  median within-run std / sqrt(n)) when those are wider: a few runs' means can cluster
  by chance.
Bounds are rounded outward to 3 significant digits. A metric whose band would be wider
than `noise` times its median level is too noisy to band and is listed instead; so is a
metric some run lacks or logs NaN/Inf for (a gate would error on that run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gatekeeper.model import Run

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Settings:
    quantiles: tuple[float, float] = (0.005, 0.995)
    frac: float = 0.25  # envelope margin, as a share of the q_lo..q_hi width
    k: float = 3.0  # across-run margin, in robust sigmas
    late: int = 10  # points in the `late` mean
    noise: float = 10.0  # too noisy when band width > noise x |median|


@dataclass(frozen=True)
class Band:
    rule_id: str
    metric: str
    steps: str  # YAML text of the selection
    reduce: str | None
    lo: float
    hi: float
    why_lo: str
    why_hi: str


@dataclass
class Suggestion:
    runs: list[str]
    bands: list[Band] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)  # "metric: why"
    unusable: list[str] = field(default_factory=list)


def down(x: float) -> float:
    return _round(x, math.floor)


def up(x: float) -> float:
    return _round(x, math.ceil)


def _round(x: float, how: object) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    scale = 10 ** (math.floor(math.log10(abs(x))) - 2)
    return float(f"{how(x / scale) * scale:.6g}")  # type: ignore[operator]


def _sigma(values: np.ndarray) -> float:
    return float(MAD_TO_SIGMA * np.median(np.abs(values - np.median(values))))


def _slug(metric: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in metric).strip("-").lower()


def _g(x: float) -> str:
    return f"{x:.4g}"


def suggest(runs: list[Run], settings: Settings) -> Suggestion:
    out = Suggestion(runs=[r.name for r in runs])
    names = sorted(set.union(*(set(r.series) for r in runs)))
    for metric in names:
        lacking = [r.name for r in runs if metric not in r.series or not len(r.series[metric])]
        if lacking:
            out.unusable.append(f"{metric}: not logged by {', '.join(lacking)}")
            continue
        bad = [r.name for r in runs if not np.isfinite(r.series[metric].values).all()]
        if bad:
            out.unusable.append(f"{metric}: NaN/Inf in {', '.join(bad)} (a gate errors on them)")
            continue
        _metric_bands(metric, runs, settings, out)
    return out


def _too_noisy(
    metric: str, what: str, lo: float, hi: float, level: float, s: Settings, out: Suggestion
) -> bool:
    if level != 0 and (hi - lo) > s.noise * abs(level):
        out.noisy.append(
            f"{metric} ({what}): band {_g(lo)}..{_g(hi)} is {_g((hi - lo) / abs(level))}x its "
            f"median {_g(level)} (limit {_g(s.noise)}x)"
        )
        return True
    return False


def _metric_bands(metric: str, runs: list[Run], s: Settings, out: Suggestion) -> None:
    series = [r.series[metric] for r in runs]
    slug, n = _slug(metric), len(runs)
    firsts = {int(x.steps[0]) for x in series}
    if len(firsts) == 1:
        step = firsts.pop()
        vals = np.array([x.values[0] for x in series])
        _across(out, s, metric, f"{slug}-step{step}", f"[{step}]", None, vals, runs, f"step {step}")
    pooled = np.concatenate([x.values for x in series])
    q_lo, q_hi = (float(np.quantile(pooled, q)) for q in s.quantiles)
    margin = s.frac * (q_hi - q_lo)
    lo, hi = min(q_lo - margin, float(pooled.min())), max(q_hi + margin, float(pooled.max()))
    if not _too_noisy(metric, "every point", lo, hi, float(np.median(pooled)), s, out):
        qs = f"q{s.quantiles[0]:g}..q{s.quantiles[1]:g} of {pooled.size} points from {n} runs"
        least, most = _g(float(pooled.min())), _g(float(pooled.max()))
        out.bands.append(
            Band(
                f"{slug}-range",
                metric,
                "all",
                None,
                down(lo),
                up(hi),
                f"{qs}: {_g(q_lo)} - {_g(s.frac)} x width = {_g(q_lo - margin)}; lowest {least}",
                f"{qs}: {_g(q_hi)} + {_g(s.frac)} x width = {_g(q_hi + margin)}; highest {most}",
            )
        )
    if min(len(x) for x in series) >= 2 * s.late:
        tails = [x.values[-s.late :] for x in series]
        vals = np.array([float(np.mean(t)) for t in tails])
        # Five runs' MAD can understate how far a run's mean of n noisy points moves (by
        # chance their means cluster): never band tighter than the standard error of that
        # mean the runs' own point-to-point noise implies (median over runs).
        floor = float(np.median([np.std(t, ddof=1) / math.sqrt(t.size) for t in tails]))
        _across(
            out,
            s,
            metric,
            f"{slug}-late",
            f"{{last: {s.late}}}",
            "mean",
            vals,
            runs,
            f"mean of the last {s.late} points",
            floor=floor,
        )


def _across(
    out: Suggestion,
    s: Settings,
    metric: str,
    rule_id: str,
    steps: str,
    reduce: str | None,
    vals: np.ndarray,
    runs: list[Run],
    what: str,
    floor: float = 0.0,
) -> None:
    sigma = max(_sigma(vals), floor)
    lo, hi = float(vals.min()) - s.k * sigma, float(vals.max()) + s.k * sigma
    if _too_noisy(metric, what, lo, hi, float(np.median(vals)), s, out):
        return
    i, j = int(np.argmin(vals)), int(np.argmax(vals))
    spread = f"{_g(s.k)} x robust sigma {_g(sigma)} across {len(runs)} runs"
    if floor and sigma == floor:
        spread = (
            f"{_g(s.k)} x {_g(sigma)}, the median standard error of that mean within a run "
            f"(wider than the robust sigma {_g(_sigma(vals))} across {len(runs)} runs)"
        )
    out.bands.append(
        Band(
            rule_id,
            metric,
            steps,
            reduce,
            down(lo),
            up(hi),
            f"{what}: lowest {_g(float(vals[i]))} ({runs[i].name}) - {spread}",
            f"{what}: highest {_g(float(vals[j]))} ({runs[j].name}) + {spread}",
        )
    )


def _line(text: str) -> str:
    return " ".join(str(text).split())  # a comment stays on its line


def render(sug: Suggestion, name: str, sources: list[str], s: Settings) -> str:
    head = [
        f"# Suggested by `gatekeeper suggest` from {len(sug.runs)} trusted runs:",
        *(f"#   {_line(r)} ({_line(src)})" for r, src in zip(sug.runs, sources, strict=True)),
        f"# first step: run range +- {_g(s.k)} robust sigmas across runs; every point: pooled "
        f"q{s.quantiles[0]:g}..q{s.quantiles[1]:g} +- {_g(s.frac)} x their width, stretched to",
        f"# every run's extremes; late: mean of the last {s.late} points, run range +- {_g(s.k)} "
        "robust sigmas",
        "# (at least that many standard errors of a run's mean). Bounds rounded outward; every "
        "input run passes every rule.",
    ]
    head += [f"# too noisy to band: {_line(x)}" for x in sug.noisy]
    head += [f"# not banded: {_line(x)}" for x in sug.unusable]
    body = [
        "version: 1",
        f"name: {name}",
        f'description: "Bands derived from {len(sug.runs)} trusted runs by gatekeeper suggest"',
        "rules:",
    ]
    for b in sug.bands:
        body += [f"  - id: {b.rule_id}", f"    metric: {_quote(b.metric)}", f"    steps: {b.steps}"]
        if b.reduce:
            body.append(f"    reduce: {b.reduce}")
        body += [
            "    check:",
            "      between:",
            f"        - {b.lo!r}  # {_line(b.why_lo)}",
            f"        - {b.hi!r}  # {_line(b.why_hi)}",
        ]
    if not sug.bands:
        body.append("  []")
    return "\n".join(head + body) + "\n"


def _quote(text: str) -> str:
    import json

    return json.dumps(text)
