"""`gatekeeper suggest`: check the bands through the real engine before they are written.

- Leave-one-out: each run is judged by the bands suggested from the others. A band that a
  held-out healthy run fails did not generalise: the band from all runs must then reach
  `SLACK` times as far from its centre as that run fell from the others' centre. It is
  widened to that (or kept, when its own spread, which now includes that run, already
  reaches it), or left out when the run lacked the values or the widened band is too
  noisy. Each band records the result (`Band.loo`); `Suggestion.loo` says what changed.
- Verified writing: every input run is judged by the written policy; a rule one of them
  does not pass is dropped and listed (the promise is checked, not assumed).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from gatekeeper.errors import UsageError
from gatekeeper.model import Run
from gatekeeper.toolkit.suggest import (
    Band,
    Settings,
    Suggestion,
    render,
    selected,
    suggest,
    too_noisy,
    widen,
)

SLACK = 1.25  # a held-out run exactly on the widened edge is luck, not a margin


def leave_one_out(runs: list[Run], sug: Suggestion, s: Settings) -> None:
    if len(runs) < 3:
        sug.loo.append(
            f"not run: it needs 3 runs (bands from {len(runs) - 1} run have no spread); "
            "these bands are unchecked"
        )
        return
    held: dict[str, int] = {}  # rule -> held-out runs that judged it
    misses: dict[str, list[tuple[str, float]]] = {}  # rule -> (run, its distance)
    for i, run in enumerate(runs):
        part = suggest(runs[:i] + runs[i + 1 :], s)
        failed = _failing(part, run, s)
        for band in part.bands:
            held[band.rule_id] = held.get(band.rule_id, 0) + 1
            if band.rule_id in failed:
                misses.setdefault(band.rule_id, []).append((run.name, _distance(band, run)))
    kept = []
    for band in sug.bands:
        missed = misses.get(band.rule_id, [])
        story = _story(held.get(band.rule_id, 0), len(runs), missed)
        if not missed:
            kept.append(replace(band, loo=story))
            continue
        out = _widened(band, missed, story, s, sug)
        if out is not None:
            kept.append(out)
    sug.bands = kept


def _widened(
    band: Band, missed: list[tuple[str, float]], story: str, s: Settings, sug: Suggestion
) -> Band | None:
    half = max(d for _, d in missed) * SLACK
    if not math.isfinite(half):
        sug.loo.append(f"{band.rule_id}: left out, {story}")
        return None
    if band.hi - band.lo >= 2 * half:
        note = f"kept, its {band.lo:g}..{band.hi:g} reaches {SLACK:g} x that far"
        sug.loo.append(f"{band.rule_id}: {note}; {story}")
        return replace(band, loo=f"{story}; {note}")
    wide = widen(band, half)
    if too_noisy(wide, (band.lo + band.hi) / 2, s, sug, f"{band.rule_id} widened"):
        sug.loo.append(f"{band.rule_id}: left out, {story}; widened it is too noisy")
        return None
    note = f"widened to {wide.lo:g}..{wide.hi:g} ({SLACK:g} x that far)"
    sug.loo.append(f"{band.rule_id}: {note}; {story}")
    return replace(wide, loo=f"{story}; {note}")


def _story(judged: int, n: int, missed: list[tuple[str, float]]) -> str:
    text = f"{judged - len(missed)} of {judged} held-out runs pass"
    if judged < n:
        text += f" ({n - judged} not judged: the others gave no band)"
    if missed:
        text += "; failed by " + ", ".join(
            f"{r} ({d:.4g} from the others' centre)" for r, d in missed
        )
    return text


def _distance(band: Band, run: Run) -> float:
    """How far `run`'s judged values fall from the band's centre (the furthest one); inf
    when the run lacks them or one is not finite."""
    values = selected(band, run)
    if not values.size or not np.isfinite(values).all():
        return math.inf
    return float(np.max(np.abs(values - (band.lo + band.hi) / 2)))


def _failing(sug: Suggestion, run: Run, s: Settings) -> set[str]:
    """Rule ids of `sug` that `run` does not pass, judged by the engine."""
    from gatekeeper.engine import evaluate
    from gatekeeper.policy.loader import load_policy
    from gatekeeper.verdict import Status

    if not sug.bands:
        return set()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "held-out.yaml"
        path.write_text(render(sug, "held-out", sug.runs, s))
        policy = load_policy(str(path))
    return {r.rule for r in evaluate([policy], run).results if r.status is not Status.PASS}


def write_verified(
    sug: Suggestion, runs: list[Run], output: str, name: str, sources: list[str], s: Settings
) -> None:
    """Write the policy, judge every input run with it, drop any rule one of them does not
    pass and write again. Each round drops at least one rule, so this ends."""
    from gatekeeper.engine import evaluate
    from gatekeeper.policy.loader import load_policy
    from gatekeeper.report.files import write_atomic
    from gatekeeper.verdict import Status

    written = False  # this call wrote `output` (a dropped rule's round)
    while True:
        if not sug.bands:  # a policy of no rules does not load: say why, leave no file
            if os.path.exists(output) and written:
                os.unlink(output)
            reasons = "; ".join((sug.noisy + sug.unusable)[:3]) or "no metric in every run"
            raise UsageError(f"suggest: no metric could be banded ({reasons})")
        write_atomic(output, render(sug, name, sources, s).encode())
        written = True
        policy = load_policy(output)
        failing = {
            (r.rule, run.name, r.message)
            for run in runs
            for r in evaluate([policy], run).results
            if r.status is not Status.PASS
        }
        if not failing:
            return
        dropped = {rule for rule, _, _ in failing}
        sug.bands = [b for b in sug.bands if b.rule_id not in dropped]
        sug.unusable += [
            f"{rule}: dropped, {run} does not pass it ({msg})" for rule, run, msg in sorted(failing)
        ]
