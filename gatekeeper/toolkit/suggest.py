"""`gatekeeper suggest RUN...`: derive bands from trusted runs (the arithmetic).

Per metric, three selections, each judged the way the runs were:
- `first`: the common first step (`steps: [s]`): a prediction band for one more run's value;
- `all`: every point within the pooled q_lo..q_hi quantiles, widened by `frac` of that
  width, and by a prediction band for one more run's lowest and highest point, then
  stretched to every run's extremes: no input run can fail it;
- `late`: the mean of the last n points, a prediction band for one more run's mean, with
  at least a run's own standard error of that mean as the spread (a few runs' means can
  cluster by chance).
A prediction band is mean +- t(n-1) x sqrt(1 + 1/n) x the sample std across the n runs:
the Student-t interval a new draw from the same normal falls in with probability p, so it
widens as runs get fewer (x78 std from 2 runs, x11.5 from 3, x5.0 from 5, x3.4 from 10 at
p = 0.99). p = 1 - (1 - level) / R for R bands (Bonferroni), so that one more healthy run
passes the whole policy with probability `level`. Bounds are rounded outward to 3
significant digits. A metric whose band would be wider than `noise` times its median
level is too noisy to band and is listed instead; so is a metric some run lacks or logs
NaN/Inf for (a gate would error on that run), and a wall-clock, throughput or progress
metric unless asked (`TIMING`).
Whether a band generalises is checked by leaving each run out (suggest_check.py).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, replace

import numpy as np

from gatekeeper.model import Run, Series

MAD_TO_SIGMA = 1.4826

# Left out unless asked (--include-timing): wall-clock and throughput metrics measure the
# machine, not the run (a healthy seed on a busier node is slower: from 3 seeds of one
# recipe, a 4th failed 6 of them), and progress counters (epoch, flos, tokens seen) measure
# how far a run got, which the step axis already says. Matched, case-insensitively, on the
# full name and on its last `/` part.
TIMING = (
    "time", "*_time", "time_*", "*runtime*", "*duration*", "elapsed*", "*latency*", "eta",
    "*_s", "*_sec", "*_secs", "*_seconds", "*_ms", "*timestamp*",
    "throughput*", "*per_second*", "*per_sec", "*_per_s", "*/s", "*tflops*", "mfu",
    "perf/*", "time/*", "timing/*", "throughput/*", "speed/*",
    "epoch", "*_epoch", "total_flos", "*tokens_seen*", "consumed_*",
)  # fmt: skip


def is_timing(metric: str) -> bool:
    name = metric.lower()
    return any(
        fnmatch.fnmatchcase(x, pat) for pat in TIMING for x in (name, name.rsplit("/", 1)[-1])
    )


@dataclass(frozen=True)
class Settings:
    quantiles: tuple[float, float] = (0.005, 0.995)
    frac: float = 0.25  # envelope margin, as a share of the q_lo..q_hi width
    level: float = 0.95  # a new healthy run passes every band with at least this probability
    rule_level: float = 0.0  # each band's level: 1 - (1 - level) / bands (Bonferroni)
    late: int = 10  # points in the `late` mean
    noise: float = 10.0  # too noisy when band width > noise x |median|
    include_timing: tuple[str, ...] = ()  # globs of timing metrics to band anyway


@dataclass(frozen=True)
class Band:
    rule_id: str
    metric: str
    kind: str  # first | all | late
    steps: str  # YAML text of the selection
    reduce: str | None
    lo: float
    hi: float
    why_lo: str
    why_hi: str
    n: int = 0  # runs it was derived from
    loo: str = ""  # the leave-one-out result, in words


@dataclass
class Suggestion:
    runs: list[str]
    bands: list[Band] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)  # "metric: why"
    unusable: list[str] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)  # timing metrics left out
    loo: list[str] = field(default_factory=list)  # what leaving each run out changed
    rule_level: float = 0.0  # each band's prediction level


def down(x: float) -> float:
    return _round(x, math.floor)


def up(x: float) -> float:
    return _round(x, math.ceil)


def _round(x: float, how: object) -> float:
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return x
    exponent = math.floor(math.log10(abs(x))) - 2
    if exponent < -300:  # a subnormal: 10**exponent is 0 (a ZeroDivisionError, exit 70)
        return x
    scale = 10.0**exponent
    return float(f"{how(x / scale) * scale:.6g}")  # type: ignore[operator]


def t_within(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer df (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, total, term = math.cos(theta) ** 2, 0.0, 1.0
    if df % 2 == 0:
        for j in range(df // 2):
            term = 1.0 if j == 0 else term * c2 * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(theta) * total
    for j in range((df - 1) // 2):
        term = 1.0 if j == 0 else term * c2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| <= t) = level: bisection (t_within rises with t)."""
    lo, hi = 0.0, 1.0
    while t_within(hi, df) < level:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_within(mid, df) < level else (lo, mid)
    return hi


def predict_factor(n: int, level: float) -> float:
    """Half-width of a prediction band for one new draw, in sample stds of n draws."""
    return t_quantile(level, n - 1) * math.sqrt(1 + 1 / n)


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else 0.0


def point_noise(values: np.ndarray) -> float:
    """A run's point-to-point noise: robust sigma of successive differences about their
    median (a steady trend cancels), over sqrt(2) (a difference holds two draws' noise)."""
    d = np.diff(values)
    if d.size < 2:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _slug(metric: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in metric).strip("-").lower()


def _g(x: float) -> str:
    return f"{x:.4g}"


def suggest(runs: list[Run], settings: Settings) -> Suggestion:
    out = Suggestion(runs=[r.name for r in runs])
    names = sorted(set.union(*(set(r.series) for r in runs)))
    usable = [m for m in names if _usable(m, runs, settings, out)]
    # A policy of R bands fails a healthy run when any band does: each band gets 1/R of
    # the allowed miss (Bonferroni: bands on one metric are correlated, so it errs wide).
    count = sum(_selections(m, runs, settings) for m in usable)
    out.rule_level = 1 - (1 - settings.level) / max(count, 1)
    s = replace(settings, rule_level=out.rule_level)
    for metric in usable:
        _metric_bands(metric, runs, s, out)
    return out


def _selections(metric: str, runs: list[Run], s: Settings) -> int:
    series = [r.series[metric] for r in runs]
    first = len({int(x.steps[0]) for x in series}) == 1
    return 1 + first + (min(len(x) for x in series) >= 2 * s.late)


def _usable(metric: str, runs: list[Run], settings: Settings, out: Suggestion) -> bool:
    if is_timing(metric) and not any(
        fnmatch.fnmatchcase(metric, g) for g in settings.include_timing
    ):
        out.timing.append(metric)
        return False
    lacking = [r.name for r in runs if metric not in r.series or not len(r.series[metric])]
    if lacking:
        out.unusable.append(f"{metric}: not logged by {', '.join(lacking)}")
        return False
    bad = [r.name for r in runs if not np.isfinite(r.series[metric].values).all()]
    if bad:
        out.unusable.append(f"{metric}: NaN/Inf in {', '.join(bad)} (a gate errors on them)")
        return False
    return True


def too_noisy(band: Band, level: float, s: Settings, out: Suggestion, what: str) -> bool:
    lo, hi = band.lo, band.hi
    if level != 0 and (hi - lo) > s.noise * abs(level):
        out.noisy.append(
            f"{band.metric} ({what}): band {_g(lo)}..{_g(hi)} is {_g((hi - lo) / abs(level))}x "
            f"its median {_g(level)} (limit {_g(s.noise)}x)"
        )
        return True
    return False


def _metric_bands(metric: str, runs: list[Run], s: Settings, out: Suggestion) -> None:
    series = [r.series[metric] for r in runs]
    slug = _slug(metric)
    firsts = {int(x.steps[0]) for x in series}
    if len(firsts) == 1:
        step = firsts.pop()
        vals = np.array([x.values[0] for x in series])
        # Three runs' first values can agree by chance (a std 1/8 of the batch noise was
        # seen): one run's first value moves at least by its own point-to-point noise.
        floor = float(np.median([point_noise(x.values[: 2 * s.late]) for x in series]))
        band = _across(s, metric, f"{slug}-step{step}", f"[{step}]", None, vals, runs, floor)
        _add(out, s, replace(band, kind="first"), vals, f"step {step}")
    _every_point(metric, series, runs, s, out)
    if min(len(x) for x in series) >= 2 * s.late:
        tails = [x.values[-s.late :] for x in series]
        vals = np.array([float(np.mean(t)) for t in tails])
        # A few runs' means can cluster by chance and understate how far one run's mean of
        # n noisy points moves: never a spread below the standard error of that mean the
        # runs' own point-to-point noise implies (median over runs).
        floor = float(np.median([np.std(t, ddof=1) / math.sqrt(t.size) for t in tails]))
        what = f"mean of the last {s.late} points"
        band = _across(
            s, metric, f"{slug}-late", f"{{last: {s.late}}}", "mean", vals, runs, floor, what
        )
        _add(out, s, replace(band, kind="late"), vals, what)


def _add(out: Suggestion, s: Settings, band: Band, vals: np.ndarray, what: str) -> None:
    if not (math.isfinite(band.lo) and math.isfinite(band.hi)):  # values near float64's end
        out.unusable.append(
            f"{band.metric} ({what}): its band {_g(band.lo)}..{_g(band.hi)} overflows float64"
        )
    elif not too_noisy(band, float(np.median(vals)), s, out, what):
        out.bands.append(band)


def _every_point(
    metric: str, series: list[Series], runs: list[Run], s: Settings, out: Suggestion
) -> None:
    pooled = np.concatenate([x.values for x in series])
    q_lo, q_hi = (float(np.quantile(pooled, q)) for q in s.quantiles)
    margin = s.frac * (q_hi - q_lo)
    # how far one more run's lowest / highest point may fall from these runs'
    k = predict_factor(len(runs), s.rule_level)
    mins = np.array([float(x.values.min()) for x in series])
    maxs = np.array([float(x.values.max()) for x in series])
    # A run's extremes are single points: one moves at least by a run's point-to-point
    # noise, however close these runs' extremes happen to be (the grad norm's maxima of 6
    # seeds sat within 0.04, two more seeds' 0.12 above them).
    noise = float(np.median([point_noise(x.values) for x in series]))
    p_lo = mins.mean() - k * max(_std(mins), noise)
    p_hi = maxs.mean() + k * max(_std(maxs), noise)
    lo = min(q_lo - margin, p_lo, float(pooled.min()))
    hi = max(q_hi + margin, p_hi, float(pooled.max()))
    qs = f"q{s.quantiles[0]:g}..q{s.quantiles[1]:g} of {pooled.size} points from {len(runs)} runs"
    pred = (
        f"{_g(k)} x std of the runs' lowest/highest points, at least the point noise "
        f"{_g(noise)} ({s.rule_level:.4g} prediction)"
    )
    band = Band(
        f"{_slug(metric)}-range", metric, "all", "all", None, down(lo), up(hi),
        f"{qs}: {_g(q_lo)} - {_g(s.frac)} x width = {_g(q_lo - margin)}; runs' lowest "
        f"{_g(float(mins.mean()))} - {pred} = {_g(p_lo)}; lowest {_g(float(pooled.min()))}",
        f"{qs}: {_g(q_hi)} + {_g(s.frac)} x width = {_g(q_hi + margin)}; runs' highest "
        f"{_g(float(maxs.mean()))} + {pred} = {_g(p_hi)}; highest {_g(float(pooled.max()))}",
        n=len(runs),
    )  # fmt: skip
    _add(out, s, band, pooled, "every point")


def _across(
    s: Settings,
    metric: str,
    rule_id: str,
    steps: str,
    reduce: str | None,
    vals: np.ndarray,
    runs: list[Run],
    floor: float = 0.0,
    what: str = "",
) -> Band:
    n, std = len(runs), _std(vals)
    k, sigma = predict_factor(n, s.rule_level), max(std, floor)
    mean = float(vals.mean())
    lo, hi = min(mean - k * sigma, float(vals.min())), max(mean + k * sigma, float(vals.max()))
    i, j = int(np.argmin(vals)), int(np.argmax(vals))
    spread = f"{_g(k)} x std {_g(sigma)} across {n} runs ({s.rule_level:.4g} prediction)"
    if floor and sigma == floor:
        own = "standard error of that mean" if reduce else "point-to-point noise"
        spread = (
            f"{_g(k)} x {_g(sigma)}, the median {own} within a run "
            f"(wider than the std {_g(std)} across {n} runs; {s.rule_level:.4g} prediction)"
        )
    what = what or f"step {steps.strip('[]')}"
    return Band(
        rule_id, metric, "", steps, reduce, down(lo), up(hi),
        f"{what}: mean {_g(mean)} - {spread} = {_g(mean - k * sigma)}; "
        f"lowest {_g(float(vals[i]))} ({runs[i].name})",
        f"{what}: mean {_g(mean)} + {spread} = {_g(mean + k * sigma)}; "
        f"highest {_g(float(vals[j]))} ({runs[j].name})",
        n=n,
    )  # fmt: skip


def selected(band: Band, run: Run) -> np.ndarray:
    """The values of `run` the band judges (empty when the run lacks them)."""
    x = run.series.get(band.metric)
    if x is None or not len(x):
        return np.array([])
    if band.kind == "first":
        return np.asarray(x.values[x.steps == int(band.steps.strip("[]"))], dtype=float)
    if band.kind == "late":
        tail = np.asarray(x.values[-int(band.steps.strip("{}").split(":")[1]) :], dtype=float)
        return np.array([tail.mean()])
    return np.asarray(x.values, dtype=float)


def widen(band: Band, half: float) -> Band:
    """The band grown to `half` either side of its centre (never narrowed), rounded outward."""
    mid = (band.lo + band.hi) / 2
    return replace(band, lo=min(band.lo, down(mid - half)), hi=max(band.hi, up(mid + half)))


def _line(text: str) -> str:
    return " ".join(str(text).split())  # a comment stays on its line


def render(sug: Suggestion, name: str, sources: list[str], s: Settings) -> str:
    k = predict_factor(len(sug.runs), sug.rule_level) if len(sug.runs) > 1 else math.inf
    head = [
        f"# Suggested by `gatekeeper suggest` from {len(sug.runs)} trusted runs:",
        *(f"#   {_line(r)} ({_line(src)})" for r, src in zip(sug.runs, sources, strict=True)),
        f"# One more healthy run passes every band with probability >= {s.level:g}: each band is "
        f"a {sug.rule_level:.4g} prediction band",
        f"# (Bonferroni), mean +- t x sqrt(1 + 1/n) x std across runs = +- {_g(k)} std for "
        f"n = {len(sug.runs)}",
        "# (first step; late: mean of the last "
        f"{s.late} points, spread at least a run's standard error of it; every point:",
        f"# also pooled q{s.quantiles[0]:g}..q{s.quantiles[1]:g} +- {_g(s.frac)} x their width). "
        "Bounds rounded outward; every input run passes every rule.",
    ]
    head += [f"# leave-one-out: {_line(x)}" for x in sug.loo]
    head += [f"# too noisy to band: {_line(x)}" for x in sug.noisy]
    head += [f"# not banded: {_line(x)}" for x in sug.unusable]
    if sug.timing:
        head.append(f"# timing, left out (--include-timing): {_line(', '.join(sug.timing))}")
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
            f"    description: {_quote(sureness(b))}",
            "    check:",
            "      between:",
            f"        - {b.lo!r}  # {_line(b.why_lo)}",
            f"        - {b.hi!r}  # {_line(b.why_hi)}",
        ]
    if not sug.bands:
        body.append("  []")
    return "\n".join(head + body) + "\n"


def sureness(b: Band) -> str:
    """How sure the band is: the runs it rests on and how it did on held-out runs."""
    return _line(f"from {b.n} runs; leave-one-out: {b.loo or 'not run'}")


def _quote(text: str) -> str:
    import json

    return json.dumps(text)
