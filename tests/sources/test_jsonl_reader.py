"""The JSONL reader against the plainest reading of the same bytes, on hostile files.

`tests/sources/jsonl_reference.py` reads a file the obvious way (`json.loads` per line,
point by point) from the definition of the record forms. Each file here is read by
`parse_file` at several block sizes (a block boundary may fall anywhere) and must give
the same outcome at every size; where the reader accepts a file the reference must too,
with the same points (steps and value bits; every NaN alike) and step axes, and where it
refuses one (a file:line error) so must the reference. The files are seeded: hostile rows
and miles record lines built from the fuzz generator's tokens (tests/fuzz/gen.py), byte
mutants of them, the fuzz suite's own cases, and rows shaped as real trainers write them
(transformers' Trainer `log_history`, TRL's DPO logs, miles' per-step rows).
"""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.jsonl import reader
from gatekeeper.sources.jsonl.reader import JsonlParser, parse_file
from tests.fuzz import gen
from tests.sources.jsonl_reference import Refused, reference

MARKERS = ['"NaN"', '"Infinity"', '"-Infinity"', '" nan "', '"inf"', '"-INF"']


def _outcome(path: Path, *, block: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What a reading of `path` in blocks of `block` bytes ends with, comparable with ==
    across block sizes: the error (text, line), or every metric's points (steps and value
    bits, every NaN alike), step axes, metric errors, end markers, line count and end."""
    with monkeypatch.context() as m:
        m.setattr(reader, "BLOCK_SIZE", block)
        parser = JsonlParser(str(path))
        try:
            end = parse_file(parser, final=True)
        except RecordError as exc:
            return ("error", str(exc), exc.line)
    return ("ok", end, parser.line, _points(parser.chunks), parser.step_keys,
            parser.metric_errors, parser.events, sorted(parser.record_metrics))


_NAN = struct.pack("<d", math.nan)


def _points(parser_chunks: dict[str, Any]) -> dict[str, list[tuple[int, bytes]]]:
    """A parser's chunks as (step, value bits) per metric, every NaN alike, in the order
    the series has them: by step, stably (`merge_chunks`), so points at one step keep the
    order the reader gave them -- the file's, whatever the blocks and key orders."""
    out = {}
    for metric, parts in parser_chunks.items():
        pts = [(s, v.tobytes() if v == v else _NAN)
               for steps, values in parts for s, v in zip(steps.tolist(), values, strict=True)]
        out[metric] = sorted(pts, key=lambda p: p[0])
    return out


def _agrees(path: Path, monkeypatch: pytest.MonkeyPatch, blocks: tuple[int, ...]) -> str:
    """The reader's outcome agrees with the reference at every block size; "ok" or "error".
    (Which error a bad file reports first may depend on where a block ends: within a
    block, a group's step column is judged before its values.)"""
    outcomes = [_outcome(path, block=b, monkeypatch=monkeypatch) for b in blocks]
    where = f"{path.name}: {path.read_bytes()[:400]!r}"
    if outcomes[0][0] == "ok":
        assert all(o == outcomes[0] for o in outcomes), where
    else:
        assert {o[0] for o in outcomes} == {"error"}, where
    try:
        points, axes, unjudgeable, events = reference(path.read_bytes())
    except Refused:
        assert outcomes[0][0] == "error", where
        return "error"
    assert outcomes[0][0] == "ok", f"{outcomes[0]} {where}"
    _, _, _, got, step_keys, metric_errors, got_events, _ = outcomes[0]
    # the reference's points in file order, by step stably: one step's points as written
    assert got == {m: sorted(pts, key=lambda p: p[0]) for m, pts in points.items()}, where
    assert step_keys == axes and set(metric_errors) == unjudgeable, where
    assert got_events == events, where
    return "ok"


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


@pytest.mark.parametrize("seeds", [range(0, 75), range(75, 150)])
def test_hostile_rows_agree_with_the_reference(tmp_path, monkeypatch, seeds):
    outcomes = set()
    for seed in seeds:
        path = tmp_path / f"rows-{seed}.jsonl"
        path.write_bytes(rows_file(seed))
        outcomes.add(_agrees(path, monkeypatch, (64, 700, 8 << 20)))
        path.write_bytes(gen.mutate(random.Random(seed), rows_file(seed + 1000), 2))
        outcomes.add(_agrees(path, monkeypatch, (64, 700, 8 << 20)))
    assert outcomes == {"ok", "error"}  # both are exercised


def test_the_fuzz_cases_agree_with_the_reference(tmp_path, monkeypatch):
    outcomes = set()
    for seed in range(200):
        for case in (gen.jsonl_case(seed), gen.jsonl_mutant(seed)):
            path = tmp_path / f"{case.name}.jsonl"
            path.write_bytes(case.data)
            outcomes.add(_agrees(path, monkeypatch, (48, 300, 8 << 20)))
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


def test_record_lines_agree_with_the_reference(tmp_path, monkeypatch):
    outcomes = set()
    for seed in range(200):
        path = tmp_path / f"records-{seed}.jsonl"
        path.write_bytes(records_file(seed))
        outcomes.add(_agrees(path, monkeypatch, (64, 1000, 8 << 20)))
        path.write_bytes(gen.mutate(random.Random(seed), records_file(seed + 500), 2))
        outcomes.add(_agrees(path, monkeypatch, (64, 1000, 8 << 20)))
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
def test_trainer_shaped_rows_agree_with_the_reference(tmp_path, monkeypatch, shape):
    rows = shape(random.Random(7))
    path = tmp_path / f"{shape.__name__}.jsonl"
    # as json.dumps writes them: a NaN loss is the bare token NaN
    row = rows[len(rows) // 2]
    row[next(k for k in row if "step" not in k)] = float("nan")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _agrees(path, monkeypatch, (256, 4096, 8 << 20)) == "ok"


def test_a_clean_file_matches_orjson_line_by_line(tmp_path, monkeypatch):
    """Plain rows over many blocks: the columns equal what orjson reads line by line, and
    the blocks' chunks are joined, the metrics sharing one steps array."""
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, (2000, 4))
    data[5, 2] = np.nan
    path = tmp_path / "plain.jsonl"
    with path.open("w") as fh:
        for i, row in enumerate(data.tolist()):
            fields = {"train/step": i, **{f"train/m{j}": v for j, v in enumerate(row)}}
            fh.write(json.dumps(fields).replace("NaN", '"NaN"') + "\n")
    monkeypatch.setattr(reader, "BLOCK_SIZE", 16 << 10)
    parser = JsonlParser(str(path))
    parse_file(parser, final=True)
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


def test_long_decimal_numbers_read_as_python_reads_them(tmp_path):
    """Numbers of 17 to 25 significant digits and any exponent (the C reader once read
    `9.2233720368547758080` as 0.0): each value is the double `float(text)` gives."""
    rng = random.Random(25)
    texts = ["9.2233720368547758080", "9.2233720368547758079", "18446744073709551616.0",
             "0.30000000000000000000001", "1.7976931348623157e308", "4.9406564584124654e-324"]
    for _ in range(3000):
        digits = rng.choice("123456789") + "".join(
            rng.choice("0123456789") for _ in range(rng.randrange(16, 25)))
        point = rng.randrange(1, len(digits))
        texts.append(f"{rng.choice(['', '-'])}{digits[:point]}.{digits[point:]}"
                     f"e{rng.randrange(-300, 280)}")
    path = tmp_path / "long.jsonl"
    path.write_text("".join(f'{{"step": {i}, "loss": {t}}}\n' for i, t in enumerate(texts)))
    parser = JsonlParser(str(path))
    parse_file(parser, final=True)
    got = parser.take_series()["loss"].values
    want = np.array([float(t) for t in texts])
    assert got.tobytes() == want.tobytes()
    assert got[0] == 9.223372036854776
