"""The JSONL live source against `check` on random files: rows of several key orders and
step axes, miles record lines, NaN markers, nulls, ints, blank lines, steps that repeat
and now and then go back, the end marker. Each file is written in random byte chunks
(lines cut anywhere) and polled after every write, the cursor saved as JSON and restored
into a new source at random (a daemon restart); what the polls delivered must be the
points `check` reads, in its order, and the session fed poll by poll must give `check`'s
final verdict.

Found in the fourteenth session: points of one metric at one step, logged by lines of two
key orders, came in the order of their key-order groups, so where a poll ended changed
their order; and a file giving a metric a step below one an earlier poll gave it (a
resume from an earlier checkpoint appending to the file) was judged in arrival order
while `check` sorts by step. The source now reads such a run again whole (`Poll.reset`)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.model import merge_chunks
from gatekeeper.policy.loader import load_policies
from gatekeeper.session import JudgingSession, judge_whole
from gatekeeper.sources.jsonl.live import LiveJsonlSource
from gatekeeper.sources.jsonl.source import JsonlSource
from gatekeeper.verdict import Verdict
from tests.helpers import write_policy

POLICY = """version: 1
name: p
rules:
  - {id: a, metric: "*", check: {max: 1.0}, for: 2}
  - {id: b, metric: "train/*", check: {spike: {window: 4, factor: 3}}}
  - {id: c, metric: "r/x", check: {finite: true}, if_logged: true}
  - {id: d, metric: "a", steps: last, check: {min: 0.0}, if_logged: true}
"""


def _value(r: random.Random) -> Any:
    c = r.random()
    if c < 0.05:
        return "NaN"
    if c < 0.08:
        return None
    if c < 0.1:
        return r.choice(["Infinity", "-Infinity"])
    if c < 0.3:
        return r.randint(-1, 2)
    return round(r.uniform(-0.5, 1.5), r.choice([1, 3, 17]))


def _content(r: random.Random) -> bytes:
    lines, step, rows_only = [], 0, r.random() < 0.4
    for _ in range(r.randint(1, 40)):
        step += r.choice([1, 1, 1, 2, 0]) if r.random() > 0.1 else -r.randint(1, 3)
        c = r.random()
        if rows_only or c < 0.5:
            row = {"step": step, "a": _value(r), "b": _value(r)}
            if r.random() < 0.2:
                row["c"] = _value(r)  # another key order, the same metrics
        elif c < 0.85:
            row = {"train/step": step, "train/x": _value(r), "train/y": _value(r)}
        else:
            row = {"metric": "r/x", "series": [[step * 10 + k, _value(r)]
                                               for k in range(r.randint(1, 3))]}
        lines.append(json.dumps(row))
        if r.random() < 0.03:
            lines.append("")
    if r.random() < 0.5:
        lines.append(json.dumps({"event": "end", "state": "finished"}))
    return ("\n".join(lines) + "\n").encode()


def _points(series: dict[str, Any]) -> dict[str, Any]:
    return {m: (s.steps.tolist(), [str(v) for v in s.values.tolist()], s.step_key)
            for m, s in series.items() if len(s)}


def _seen(verdict: Verdict) -> list[tuple[Any, ...]]:
    return [(x.rule, x.status, x.message, x.step, x.judged) for x in verdict.results]


def _polled_as_checked(seed: int, tmp: Path, policies: list[Any]) -> None:
    r = random.Random(seed)
    data, path = _content(r), tmp / f"m{seed}.jsonl"
    path.write_bytes(b"")
    source, session = LiveJsonlSource(str(path)), JudgingSession(policies, live=True)
    chunks: dict[str, list[Any]] = {}
    at = 0
    while at < len(data):
        end = min(len(data), at + r.randint(1, 80))
        with open(path, "ab") as fh:
            fh.write(data[at:end])
        at = end
        if r.random() < 0.3:  # a restart: a new source from the cursor saved as JSON
            cursor = json.loads(json.dumps(source.cursor()))
            source = LiveJsonlSource(str(path))
            source.restore(cursor)
        poll = source.poll()
        if poll.reset:
            chunks = {}
        for metric, s in poll.series.items():
            chunks.setdefault(metric, []).append(s)
        session.feed(poll.series, poll.run, reset=poll.reset)
    whole = JsonlSource(str(path)).read()
    polled = {m: merge_chunks(m, [(s.steps, s.values) for s in parts], parts[0].step_key)
              for m, parts in chunks.items()}
    assert _points(polled) == _points(whole.series), seed
    assert _seen(session.verdict(final=True)) == _seen(judge_whole(policies, whole)[1]), seed


@pytest.mark.parametrize("block", range(3))
def test_random_files_polled_in_byte_chunks_read_and_judge_as_check(
    block: int, tmp_path: Path
) -> None:
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", POLICY))])
    for seed in range(block * 100, block * 100 + 100):
        _polled_as_checked(seed, tmp_path, policies)


def test_a_resume_from_an_earlier_step_is_judged_as_check_judges_it(tmp_path: Path) -> None:
    """Steps 0..70 with one high value at step 61, then a resume from step 50 appending
    51..80 with one at step 60: `check` sorts them by step -- 60 (resumed, high), 61
    (first, high) -- two in a row, so `for: 2` fails. Polled in arrival order the two
    were never next to each other: the watch passed what `check` fails."""
    text = "version: 1\nname: p\nrules:\n  - {id: hi, metric: loss, check: {max: 1.0}, for: 2}\n"
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    path = tmp_path / "m.jsonl"

    def rows(steps: range, high: int) -> str:
        return "".join(json.dumps({"step": s, "loss": 2.0 if s == high else 0.5}) + "\n"
                       for s in steps)

    source, session = LiveJsonlSource(str(path)), JudgingSession(policies, live=True)
    resets = []
    for part in (rows(range(0, 71), 61), rows(range(51, 81), 60)):
        with open(path, "a") as fh:
            fh.write(part)
        poll = source.poll()
        resets.append(poll.reset)
        session.feed(poll.series, poll.run, reset=poll.reset)
    polled = session.verdict(final=True).results[0]
    checked = judge_whole(policies, JsonlSource(str(path)).read())[1].results[0]
    assert resets == [False, True]
    assert (polled.status.value, polled.step) == (checked.status.value, checked.step) == (
        "fail", 61)
