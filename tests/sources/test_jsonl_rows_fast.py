"""The fast ways through a block give exactly what the whole-block path gives.

`JsonlParser.parse_lines` reads a block of rows that share one key order line by line
into a table (`_uniform_rows`), rows of a few key orders into one table each
(`_grouped_rows`), a block of record lines one line at a time
(`_records_one_by_one`), and hands any other block to `_parse_lines`. Each file
here is read twice, block by block at the same boundaries: once as shipped and once with
the fast way switched off. The columns (steps, values bit for bit, NaN points included),
step axes, metric errors, end markers, line count and any error's text (file:line and
what was found) must be identical. The files are seeded: hostile rows built from the
fuzz generator's tokens (tests/fuzz/gen.py), byte mutants of them, and rows shaped as
real trainers write them (transformers' Trainer `log_history`, TRL's DPO logs, miles'
per-step rows).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.jsonl import reader
from gatekeeper.sources.jsonl.reader import JsonlParser, parse_file
from tests.fuzz import gen


@pytest.fixture(autouse=True)
def _python_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the Python ways through a block: the C rows reader, which
    would take uniform blocks first, is off (tests/sources/test_jsonl_rows_c.py compares
    it with them)."""
    monkeypatch.setattr(reader, "USE_C", False)


MARKERS = ['"NaN"', '"Infinity"', '"-Infinity"', '" nan "', '"inf"', '"-INF"']


def _outcome(path: Path, *, fast: bool, block: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setattr(reader, "BLOCK_SIZE", block)
        if not fast:
            m.setattr(JsonlParser, "_uniform_rows", lambda self, pieces, quotes: False)
            m.setattr(JsonlParser, "_records_one_by_one", lambda self, pieces: False)
            m.setattr(JsonlParser, "_grouped_rows", lambda self, pieces, quotes: False)
        parser = JsonlParser(str(path))
        try:
            end = parse_file(parser, final=True)
        except RecordError as exc:
            return ("error", str(exc), exc.line, parser.line)
    return parser_state(parser, end)


def parser_state(parser: JsonlParser, end: int) -> Any:
    """Everything a parser ends with, comparable with ==: every chunk's bytes (NaN sign
    bits included), step axes, metric errors, end markers, line count and end offset."""
    chunks = {
        metric: [(s.dtype.str, s.tobytes(), v.dtype.str, v.tobytes()) for s, v in parts]
        for metric, parts in parser.chunks.items()
    }
    return (
        "ok", end, parser.line, chunks, parser.step_keys, parser.metric_errors,
        parser.events, sorted(parser.record_metrics),
    )


def _same(path: Path, block: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    fast = _outcome(path, fast=True, block=block, monkeypatch=monkeypatch)
    slow = _outcome(path, fast=False, block=block, monkeypatch=monkeypatch)
    assert fast == slow, f"{path.name} (block {block}): {path.read_bytes()[:400]!r}"
    return fast


def _token(rng: random.Random, good: list[str], bad: list[str], p_bad: float) -> str:
    r = rng.random()
    if r < p_bad:
        return rng.choice(bad)
    if r < 2 * p_bad:
        return rng.choice(good + MARKERS)
    return repr(round(rng.uniform(-2, 2), rng.randrange(1, 12)))


def rows_file(seed: int) -> bytes:
    """Rows sharing one key order, now and then spoilt: a hostile step or value, a key
    dropped or reordered, a blank line, a record line, an end marker, a non-object line,
    bare NaN/Infinity, a truncated tail."""
    rng = random.Random(seed)
    ns = rng.choice(["", "train/"])
    step_key = rng.choice(["step", "_step"]) if not ns else "train/step"
    name = json.dumps(rng.choice(gen.NAMES))[1:-1]
    keys = [step_key, f"{ns}loss", f"{ns}w{name}", f"{ns}kl"][: rng.randrange(2, 5)]
    p_bad = rng.choice([0.0, 0.0, 0.002, 0.02, 0.1])
    lines = []
    for i in range(rng.randrange(2, 120)):
        step = str(i) if rng.random() > p_bad else _token(rng, gen.STEPS_OK, gen.STEPS_BAD, 0.5)
        vals = [_token(rng, gen.VALUES_OK, gen.VALUES_BAD, p_bad) for _ in keys[1:]]
        fields = list(zip(keys, [step, *vals], strict=True))
        r = rng.random()
        if r < p_bad:
            rng.shuffle(fields)
        elif r < 2 * p_bad:
            fields.pop(rng.randrange(len(fields)))
        line = "{" + ", ".join(f'"{k}": {v}' for k, v in fields) + "}"
        r = rng.random()
        if r < p_bad / 2:
            line = rng.choice(["", "   ", "[1, 2]", "3", '{"event": "end", "state": "failed"}',
                               '{"metric": "r/x", "series": [[0, 1], [1, null]]}'])
        lines.append(line)
    text = "\n".join(lines) + ("\n" if rng.random() > p_bad else "")
    return text.encode()


@pytest.mark.parametrize("block", [64, 700, 8 << 20])
def test_fast_rows_equal_the_whole_block_path_on_hostile_rows(tmp_path, monkeypatch, block):
    outcomes = set()
    for seed in range(150):
        path = tmp_path / f"rows-{seed}.jsonl"
        path.write_bytes(rows_file(seed))
        outcomes.add(_same(path, block, monkeypatch)[0])
        mutant = gen.mutate(random.Random(seed), rows_file(seed + 1000), 2)
        path.write_bytes(mutant)
        outcomes.add(_same(path, block, monkeypatch)[0])
    assert outcomes == {"ok", "error"}  # both ways are exercised


@pytest.mark.parametrize("block", [48, 300, 8 << 20])
def test_fast_ways_equal_the_whole_block_path_on_the_fuzz_cases(tmp_path, monkeypatch, block):
    outcomes = set()
    for seed in range(200):
        for case in (gen.jsonl_case(seed), gen.jsonl_mutant(seed)):
            path = tmp_path / f"{case.name}.jsonl"
            path.write_bytes(case.data)
            outcomes.add(_same(path, block, monkeypatch)[0])
    assert outcomes == {"ok", "error"}


def records_file(seed: int) -> bytes:
    """miles record lines sharing one key order (sometimes with "step_key"), now and then
    spoilt: a hostile step or value, a null step, a point that is not a pair, bare NaN, a
    line of another key order, a blank line, a row."""
    rng = random.Random(seed)
    p_bad = rng.choice([0.0, 0.0, 0.01, 0.05])
    with_key = rng.random() < 0.3
    lines = []
    for i in range(rng.randrange(1, 12)):
        pts = []
        for k in range(rng.randrange(0, 30)):
            step = str(k) if rng.random() > p_bad else _token(rng, gen.STEPS_OK,
                                                                 gen.STEPS_BAD, 0.5)
            value = _token(rng, gen.VALUES_OK, gen.VALUES_BAD, p_bad)
            pts.append(f"[{step}, {value}]" if rng.random() > p_bad / 3 else f"[{step}]")
        head = f'"metric": "train/m{i % 4}", "series": [{", ".join(pts)}]'
        if with_key:
            head += ', "step_key": "train/step"'
        if rng.random() < p_bad:
            head = ", ".join(reversed(head.split(", ", 1)))
        line = "{" + head + "}"
        if rng.random() < p_bad / 2:
            line = rng.choice(["", '{"step": 1, "loss": 2}', "[]", '{"metric": 1, "series": []}'])
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("block", [64, 1000, 8 << 20])
def test_records_one_by_one_equal_the_whole_block_path(tmp_path, monkeypatch, block):
    outcomes = set()
    for seed in range(200):
        path = tmp_path / f"records-{seed}.jsonl"
        path.write_bytes(records_file(seed))
        outcomes.add(_same(path, block, monkeypatch)[0])
        path.write_bytes(gen.mutate(random.Random(seed), records_file(seed + 500), 2))
        outcomes.add(_same(path, block, monkeypatch)[0])
    assert outcomes == {"ok", "error"}


def _hf_log_history(rng: random.Random) -> list[dict[str, Any]]:
    """transformers' Trainer `state.log_history` (4.x): train rows and eval rows on `step`,
    and the closing summary row."""
    out: list[dict[str, Any]] = []
    for step in range(10, 301, 10):
        out.append({"loss": round(rng.uniform(0.5, 3), 4), "grad_norm": rng.uniform(0.1, 9),
                    "learning_rate": 5e-05 * (1 - step / 300), "epoch": step / 100,
                    "step": step})
        if step % 50 == 0:
            out.append({"eval_loss": rng.uniform(0.5, 3), "eval_runtime": rng.uniform(1, 9),
                        "eval_samples_per_second": rng.uniform(10, 99),
                        "eval_steps_per_second": rng.uniform(1, 9), "epoch": step / 100,
                        "step": step})
    out.append({"train_runtime": 812.3, "train_samples_per_second": 11.8,
                "train_steps_per_second": 0.37, "total_flos": 1.2e15, "train_loss": 1.1,
                "epoch": 3.0, "step": 300})
    return out


def _trl_dpo(rng: random.Random) -> list[dict[str, Any]]:
    """TRL's DPOTrainer logs (0.x): namespaced metrics without their own step field."""
    return [{"loss": rng.uniform(0, 1), "grad_norm": rng.uniform(0, 5),
             "learning_rate": 1e-6, "rewards/chosen": rng.uniform(-1, 1),
             "rewards/rejected": rng.uniform(-1, 1), "rewards/accuracies": rng.random(),
             "rewards/margins": rng.uniform(0, 2), "logps/chosen": -rng.uniform(50, 300),
             "logps/rejected": -rng.uniform(50, 300), "logits/chosen": rng.uniform(-3, 3),
             "logits/rejected": rng.uniform(-3, 3), "epoch": s / 400, "step": s}
            for s in range(1, 401)]


def _miles_rows(rng: random.Random) -> list[dict[str, Any]]:
    """miles' per-step rows: train/* on train/step, rollout/* and perf/* on rollout/step."""
    out: list[dict[str, Any]] = []
    for s in range(300):
        out.append({"train/step": s, "train/loss": rng.uniform(0, 2),
                    "train/ppo_kl": rng.uniform(0, 1e-3), "train/grad_norm": rng.uniform(0, 4)})
        if s % 3 == 0:
            out.append({"rollout/step": s // 3, "rollout/raw_reward": rng.random(),
                        "perf/step_time": rng.uniform(1, 3), "perf/tokens_per_gpu_per_sec":
                        rng.uniform(900, 1100)})
    return out


@pytest.mark.parametrize("shape", [_hf_log_history, _trl_dpo, _miles_rows])
def test_fast_rows_equal_the_whole_block_path_on_real_shapes(tmp_path, monkeypatch, shape):
    rng = random.Random(7)
    rows = shape(rng)
    path = tmp_path / f"{shape.__name__}.jsonl"
    # as json.dumps writes them: a NaN loss is the bare token NaN
    row = rows[len(rows) // 2]
    row[next(k for k in row if "step" not in k)] = float("nan")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for block in (256, 4096, 8 << 20):
        outcome = _same(path, block, monkeypatch)
        assert outcome[0] == "ok"
    # and a fast way did read them: the rows are whole, each metric's points all there
    taken = []
    for name in ("_uniform_rows", "_grouped_rows"):
        real = getattr(JsonlParser, name)
        monkeypatch.setattr(JsonlParser, name, lambda self, p, q, real=real, name=name: (
            taken.append((name, real(self, p, q))) or taken[-1][1]))
    parser = JsonlParser(str(path))
    parse_file(parser, final=True)
    counts = {k: 0 for r in rows for k in r}
    for r in rows:
        for k in r:
            counts[k] += 1
    for metric, parts in parser.chunks.items():
        assert sum(len(s) for s, _ in parts) == counts[metric]
    assert (("_grouped_rows", True) in taken) == (shape is not _trl_dpo)
    assert ("_uniform_rows", True) in taken or shape is not _trl_dpo


def test_the_fast_way_is_taken_and_matches_orjson_on_a_clean_file(tmp_path, monkeypatch):
    """Not a test that cannot fail: the fast way must actually run on plain rows, and its
    columns equal what orjson reads line by line."""
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, (2000, 4))
    data[5, 2] = np.nan
    path = tmp_path / "plain.jsonl"
    with path.open("w") as fh:
        for i, row in enumerate(data.tolist()):
            fields = {"train/step": i, **{f"train/m{j}": v for j, v in enumerate(row)}}
            fh.write(json.dumps(fields).replace("NaN", '"NaN"') + "\n")
    taken = []
    real = JsonlParser._uniform_rows

    def spy(self: JsonlParser, pieces: list[bytes], quotes: int | None) -> bool:
        taken.append(real(self, pieces, quotes))
        return taken[-1]

    monkeypatch.setattr(JsonlParser, "_uniform_rows", spy)
    monkeypatch.setattr(reader, "BLOCK_SIZE", 16 << 10)
    parser = JsonlParser(str(path))
    parse_file(parser, final=True)
    assert len(taken) > 5 and all(taken)
    # the blocks' chunks are joined, the four metrics sharing one steps array
    assert {len(parts) for parts in parser.chunks.values()} == {1}
    assert len({id(parts[0][0]) for parts in parser.chunks.values()}) == 1
    series = parser.take_series()
    for j in range(4):
        s = series[f"train/m{j}"]
        assert s.steps.tolist() == list(range(2000))
        np.testing.assert_array_equal(s.values, data[:, j])


def _readlines_parse_file(parser: JsonlParser, *, final: bool) -> int:
    """`parse_file` as it was before blocks were read whole (gatekeeper f9ee58f): lines
    by `readlines`, so the reference for where a file ends and what its lines are."""
    pos = 0
    with open(parser.path, "rb") as fh:
        while True:
            lines = fh.readlines(8 << 20)
            if not lines:
                return pos
            tail = lines[-1]
            if not tail.endswith(b"\n"):
                lines.pop()
                if final and tail.strip():
                    parser.parse_lines(lines)
                    parser._truncated(tail, parser.line + 1)
                parser.parse_lines(lines)
                if final:
                    parser.line += 1
                    return pos + sum(map(len, lines)) + len(tail)
                return pos + sum(map(len, lines))
            parser.parse_lines(lines)
            pos += sum(map(len, lines))


@pytest.mark.parametrize("final", [True, False])
def test_blocks_read_whole_end_where_readlines_ended(tmp_path, monkeypatch, final):
    """Same offset, line count, series and error text as the `readlines` loop, on the
    fuzz cases, their truncated tails, blank tails and lines longer than a block."""
    monkeypatch.setattr(JsonlParser, "_uniform_rows", lambda self, pieces, quotes: False)
    monkeypatch.setattr(JsonlParser, "_records_one_by_one", lambda self, pieces: False)
    datas = [gen.jsonl_case(s).data for s in range(150)]
    datas += [gen.jsonl_mutant(s).data for s in range(150)]
    datas += [d + b"  " for d in datas[:20]] + [d[:-7] for d in datas[:20]]
    datas.append(b'{"step": 1, "loss": ' + b"1" * 3000 + b".5}\n" + b'{"step": 2, "loss"')
    for i, data in enumerate(datas):
        path = tmp_path / f"f{i}.jsonl"
        path.write_bytes(data)
        got = []
        for read in (_readlines_parse_file, parse_file):
            parser = JsonlParser(str(path))
            try:
                end: Any = read(parser, final=final)
            except RecordError as exc:
                end = str(exc)
            got.append((end, parser.line, parser.take_series(), parser.metric_errors))
        (end_a, line_a, series_a, err_a), (end_b, line_b, series_b, err_b) = got
        assert (end_a, line_a, err_a) == (end_b, line_b, err_b), data[:300]
        assert series_a.keys() == series_b.keys()
        for k, s in series_a.items():
            assert s.steps.tobytes() == series_b[k].steps.tobytes()
            assert s.values.tobytes() == series_b[k].values.tobytes()


def test_a_line_longer_than_a_block_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "BLOCK_SIZE", 16)
    path = tmp_path / "long.jsonl"
    path.write_text('{"step": 0, "loss": 0.5, "a_rather_long_metric_name": 1}\n' * 3)
    parser = JsonlParser(str(path))
    assert parse_file(parser, final=True) == path.stat().st_size
    assert parser.line == 3
    assert parser.take_series()["a_rather_long_metric_name"].values.tolist() == [1.0] * 3
