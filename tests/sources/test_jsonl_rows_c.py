"""The C rows reader (`gatekeeper/sources/jsonl/_rows.c`) gives exactly what the Python
ways give, or declines.

`parse_file` and `JsonlParser.feed` offer each block first to `JsonlParser.parse_block`,
which has `_rows.rows` read a block of rows of one key order straight into float64
columns, and otherwise (the extension declines, is not built, or `reader.USE_C` is off)
leaves the block to `parse_lines` — `_uniform_rows`, `_grouped_rows`, `_parse_lines`,
which decide every error and message. Each input here is read with `USE_C` on and off,
at the same block boundaries, and everything the parser ends with must be identical:
columns (steps and values bit for bit via their bytes, NaN sign bits included), step
axes, metric errors, end markers, line count, and any error's type, file, line and text.
The inputs mirror what `_rows.c` must get right: 17-digit `repr` floats, random decimal
texts of up to 25 digits and any exponent (correct rounding beyond Clinger's fast
path), subnormals, 1e308, -0 / -0.0, integers near 2**53 and 2**63, every marker
spelling, JSON whitespace between tokens, and what it must decline (bools, leading
zeros, bare NaN, numeric strings, escapes, blank lines, nesting, overflow), alone and as
one odd line in the middle of a block; plus the hostile rows and fuzz cases of
test_jsonl_rows_fast.py and trainer-shaped rows. Tests that the C path was actually
taken (and declined where it must) keep the comparisons from being vacuous.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gatekeeper.errors import RecordError
from gatekeeper.sources.jsonl import reader
from gatekeeper.sources.jsonl.reader import JsonlParser, parse_file
from tests.fuzz import gen
from tests.sources.test_jsonl_rows_fast import (
    _hf_log_history,
    _miles_rows,
    _trl_dpo,
    parser_state,
    rows_file,
)

_rows = pytest.importorskip(
    "gatekeeper.sources.jsonl._rows",
    reason="the C extension gatekeeper.sources.jsonl._rows is not built (no C compiler at "
    "install): gatekeeper reads rows with its Python ways only",
)

MARKER_SPELLINGS = [
    "NaN", "nan", "NAN", "-nan", "+nan", "-NaN", " NaN ", "  nan", "inf", "+inf", "-inf",
    "Inf", "INF", "Infinity", "-Infinity", "+Infinity", "infinity", "INFINITY", " -inf ",
    "+INFINITY", "-infinity",
]
WS = ["", " ", "  ", "\t", "\r", " \t "]


def _outcome(path: Path, *, use_c: bool, block: int, monkeypatch: pytest.MonkeyPatch,
             taken: list[bool] | None = None) -> Any:
    with monkeypatch.context() as m:
        m.setattr(reader, "BLOCK_SIZE", block)
        m.setattr(reader, "USE_C", use_c)
        if taken is not None:
            real = JsonlParser.parse_block

            def spy(self: JsonlParser, data: bytes, end: int, **kw: Any) -> bool:
                taken.append(real(self, data, end, **kw))
                return taken[-1]

            m.setattr(JsonlParser, "parse_block", spy)
        parser = JsonlParser(str(path))
        try:
            end = parse_file(parser, final=True)
        except RecordError as exc:
            return ("error", type(exc), exc.file, exc.line, str(exc), parser.line)
    return parser_state(parser, end)


def _same(path: Path, block: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[bool]]:
    taken: list[bool] = []
    c = _outcome(path, use_c=True, block=block, monkeypatch=monkeypatch, taken=taken)
    py = _outcome(path, use_c=False, block=block, monkeypatch=monkeypatch)
    assert c == py, f"{path.name} (block {block}): {path.read_bytes()[:400]!r}"
    return c, taken


def _random_double(rng: random.Random) -> float:
    """Any finite double, from its bits (subnormals and huge exponents included)."""
    while True:
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if np.isfinite(x):
            return float(x)


def _decimal_text(rng: random.Random) -> str:
    """A JSON number text of up to 25 significant digits, any exponent: correct rounding
    beyond the fast path (and halfway cases near 2**53) is what this exercises."""
    r = rng.random()
    if r < 0.15:  # near 2**53 and 2**63, as integers and as floats
        base = rng.choice([2**53, 2**63, 2**62, 10**15, 10**19])
        n = base + rng.randrange(-3, 4)
        if n >= 2**63:
            n = 2**63 - 1 - rng.randrange(3)
        return rng.choice([str(n), f"-{n}", f"{n}.0", f"{n}e0", f"-{n}.5"])
    if r < 0.25:  # halfway between two doubles, written out exactly
        x = _random_double(rng)
        y = np.nextafter(x, np.inf)
        from decimal import Decimal

        return format((Decimal(x) + Decimal(float(y))) / 2, ".40e").replace("+", "")
    digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 26)))
    digits = digits.lstrip("0") or "0"
    sign = rng.choice(["", "", "-"])
    if rng.random() < 0.5 and len(digits) > 1:
        cut = rng.randrange(1, len(digits))
        text = f"{digits[:cut]}.{digits[cut:]}"
    else:
        # an integer of over 18 digits may not fit int64: declined (HOSTILE_VALUES)
        text = digits[:18] if rng.random() < 0.5 else f"0.{'0' * rng.randrange(0, 8)}{digits}"
    if rng.random() < 0.6:  # finite: up to 25 digits times 1e280; down to underflow
        sign_e = rng.choice(["", "+", "-"])
        text += rng.choice("eE") + sign_e + str(rng.randrange(0, 360 if sign_e == "-" else 281))
    return sign + text


def _number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return repr(_random_double(rng))
    if r < 0.45:
        return repr(round(rng.uniform(-2, 2), rng.randrange(1, 12)))
    if r < 0.5:
        return rng.choice([
            "0", "-0", "0.0", "-0.0", "0e0", "-0E-0", "1e308", "1.7976931348623157e308",
            "-1.7976931348623157E+308", "5e-324", "4.9e-324", "2.2250738585072011e-308",
            "2.2250738585072014e-308", "1e-400", "-1e-400", "9007199254740993",
            "9007199254740993.0", "-9223372036854775808", "9223372036854775807",
            "1E22", "1e23", "8.98846567431158e307", "0.1", "123456789012345678",
            "1234567890123456789", "0.30000000000000004",
            # the fast path's edges: 19/20 significant digits, w around 2**53, 10**+-22
            "0.0000001234567890123456789", "0.000000123456789012345678", "1234567890123456789.5",
            "12345678901234567890e-5", "9007199254740993e-3", "9007199254740992e-22",
            "9007199254740992e22", "9007199254740992e23", "1e-22", "1e-23",
            "100000000000000000000e-5",
            "0.1000000000000000000", "10.000000000000000001",
        ])
    return _decimal_text(rng)


def _value(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.03:
        return "null"
    if r < 0.06:
        return json.dumps(rng.choice(MARKER_SPELLINGS))
    return _number(rng)


def _row(rng: random.Random, keys: list[str], step: int, ws: bool) -> str:
    def w() -> str:
        return rng.choice(WS) if ws else ""

    fields = [f'{w()}"{keys[0]}"{w()}:{w()}{step}{w()}']
    fields += [f'{w()}"{k}"{w()}:{w()}{_value(rng)}{w()}' for k in keys[1:]]
    return w() + "{" + ",".join(fields) + "}" + w()


KEY_SETS = [
    ["step", "loss"],
    ["train/step", "train/loss", "train/kl", "train/grad_norm", "train/lr"],
    ["_step", "a", "b\u00e9", "\u03bb/x", "c d"],
]


def _clean_file(seed: int, *, ws: bool, lines: int = 300) -> str:
    rng = random.Random(seed)
    keys = KEY_SETS[seed % len(KEY_SETS)]
    return "".join(_row(rng, keys, s, ws) + "\n" for s in range(lines))


@pytest.mark.parametrize("block", [200, 4096, 8 << 20])
def test_c_equals_python_on_numbers_markers_and_whitespace(tmp_path, monkeypatch, block):
    for seed in range(40):
        path = tmp_path / f"clean-{seed}.jsonl"
        path.write_text(_clean_file(seed, ws=seed % 2 == 1), encoding="utf-8")
        (outcome, *_), taken = _same(path, block, monkeypatch)
        assert outcome == "ok"
        assert taken and all(taken)  # C read every block: not two runs of the Python ways


@pytest.mark.parametrize("libc", [True, False])
def test_the_kernel_rounds_every_number_as_orjson_and_numpy_do(libc):
    """Mirrors `_uniform_rows`: orjson parses the line, np.fromiter makes float64 of its
    values (Python's float(int) for integers). 60,000 number texts in one block: C
    converts each bit for bit the same. Long texts go to glibc's strtod_l or, switched
    off (as on a libc without it), to PyOS_string_to_double: both paths are checked."""
    before = _rows.use_libc_strtod(libc)
    try:
        _kernel_rounds_as_orjson()
    finally:
        _rows.use_libc_strtod(before)


def _kernel_rounds_as_orjson() -> None:
    rng = random.Random(11)
    texts = [_value(rng) for _ in range(60_000)]
    good, lines = [], []
    for t in texts:
        line = f'{{"step":0,"v":{t}}}'.encode()
        try:
            vals = list(orjson.loads(line).values())
            want = np.fromiter(vals, dtype=np.float64, count=2)
        except (orjson.JSONDecodeError, OverflowError, ValueError, TypeError):
            continue
        good.append(want)
        lines.append(line)
    assert len(lines) > 50_000
    block = b"\n".join(lines) + b"\n"
    out = _rows.rows(block, len(block), (b'"step"', b'"v"'))
    assert out is not None
    got = np.frombuffer(out, dtype=np.float64).reshape(2, len(lines))
    want = np.array(good).T
    mismatch = np.flatnonzero(got[1].view(np.int64) != want[1].view(np.int64))
    assert mismatch.size == 0, [(lines[i], got[1][i], want[1][i]) for i in mismatch[:5]]
    assert np.array_equal(got[0].view(np.int64), want[0].view(np.int64))


HOSTILE_VALUES = [
    "true", "false", "NaN", "Infinity", "-Infinity", "nan", "01", "-01", "00", "+1", ".5",
    "1.", "-", "1e", "1e+", "1E-", "0x10", "1_000", "--1", "1..2", '"0.5"', '"NaN\\u0020"',
    '"N\\u0061N"', '"NaN\t"', '"nanx"', '""', '"é"', "[1]", "{}", '{"a": 1}', "nul", "nulls",
    "1e309", "-1e400000", "18446744073709551616", "9223372036854775808",
    "-9223372036854775809", "12345678901234567890", "1" * 70 + ".5", "0." + "0" * 70 + "1",
    "1 2", "null null", "1,", "",
]


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_odd_line_in_a_block_declines_it_and_the_python_ways_decide(
    tmp_path, monkeypatch, where
):
    """Bools, bare NaN/Infinity, non-JSON number grammar, numeric strings, escapes,
    nesting, overflow, integers beyond int64 or 19 digits, number texts over 64 bytes:
    the block is declined whole and read by the Python ways (same outcome either way)."""
    for i, bad in enumerate(HOSTILE_VALUES):
        rng = random.Random(i)
        rows = [f'{{"step": {s}, "loss": {_number(rng)}, "kl": 0.5}}' for s in range(50)]
        at = {"first": 0, "middle": 25, "last": 49}[where]
        rows[at] = f'{{"step": {at}, "loss": {bad}, "kl": 0.5}}'
        path = tmp_path / f"odd-{i}.jsonl"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        _, taken = _same(path, 8 << 20, monkeypatch)
        decided = _rows.rows(path.read_bytes(), path.stat().st_size,
                             (b'"step"', b'"loss"', b'"kl"'))
        # none of them is a value it is sure of: None, or where a line's keys seemed to
        # differ (then `grouped` is tried, and the line, read by orjson, declines it)
        assert decided is None or type(decided) is int, bad
        assert taken == [False]


ODD_LINES = [
    "", "   ", "\r", '{"step": 3}', '{"loss": 1, "step": 3, "kl": 0.5}', "[1, 2]", "3",
    '{"step": 3, "loss": 1, "kl": 0.5, "x": 1}', '{"step": 3, "loss": 1, "kl": 0.5,}',
    '{"event": "end", "state": "failed"}', '{"metric": "r/x", "series": [[0, 1]]}',
    '{"step": 3, "loss": 1, "kl": 0.5', '{"step": 3.5, "loss": 1, "kl": 0.5}',
    '{"step": true, "loss": 1, "kl": 0.5}', '{"step": 1e300, "loss": 1, "kl": 0.5}',
    '{"step": null, "loss": 1, "kl": 0.5}', '{"step": "3", "loss": 1, "kl": 0.5}',
    '{"step": 9223372036854775807, "loss": 1, "kl": 0.5}',
    '{"step": 9007199254740993, "loss": 1, "kl": 0.5}',
    '{"step": -0.0, "loss": 1, "kl": 0.5}', '{"step": 1.0, "loss": 1, "kl": 0.5}',
    '{"st\\u0065p": 3, "loss": 1, "kl": 0.5}', '{"step": 3, "loss": 1, "loss": 2}',
    '\ufeff{"step": 3, "loss": 1, "kl": 0.5}', '{"step": 3, "loss": 1, "kl": 0.5} x',
    '{"step": 3, "loss": 1e999, "kl": 0.5}', '{"step": 3, "loss": "0.5", "kl": 0.5}',
]


@pytest.mark.parametrize("block", [120, 8 << 20])
def test_odd_lines_and_step_doubts_read_the_same_either_way(tmp_path, monkeypatch, block):
    """Steps the floats cannot settle (fractions, beyond 2**53, NaN, out of int64) are
    looked up in the line as written on the C path too: same steps, same messages."""
    outcomes = set()
    for i, odd in enumerate(ODD_LINES):
        for at in (0, 7, 19):
            rows = [f'{{"step": {s}, "loss": {s / 7}, "kl": 0.5}}' for s in range(20)]
            rows[at] = odd
            path = tmp_path / f"odd-line-{i}-{at}.jsonl"
            path.write_text("\n".join(rows) + "\n", encoding="utf-8")
            outcomes.add(_same(path, block, monkeypatch)[0][0])
    assert outcomes == {"ok", "error"}


def test_the_decision_is_per_block(tmp_path, monkeypatch):
    """A bool in the middle block: C reads the blocks before and after, the Python ways
    read that one (a bool value judges as 0/1 there), and the result is the same."""
    rng = random.Random(5)
    rows = [f'{{"step": {s}, "loss": {_number(rng)}}}' for s in range(300)]
    rows[150] = '{"step": 150, "loss": true}'
    path = tmp_path / "blocks.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    (kind, *_), taken = _same(path, 2048, monkeypatch)
    assert kind == "ok"
    assert len(taken) > 3 and taken.count(False) == 1
    assert taken[0] and taken[-1]
    lines = []
    real = JsonlParser.parse_lines
    monkeypatch.setattr(JsonlParser, "parse_lines", lambda self, pieces, **kw: (
        lines.append(len(pieces)), real(self, pieces, **kw))[1])
    monkeypatch.setattr(reader, "BLOCK_SIZE", 2048)
    parse_file(JsonlParser(str(path)), final=True)
    assert len(lines) == 1  # only the declined block was split into lines


@pytest.mark.parametrize("block", [64, 700, 8 << 20])
def test_c_equals_python_on_hostile_rows_and_fuzz_cases(tmp_path, monkeypatch, block):
    outcomes, accepted = set(), 0
    for seed in range(150):
        datas = [rows_file(seed), gen.mutate(random.Random(seed), rows_file(seed + 1000), 2),
                 gen.jsonl_case(seed).data, gen.jsonl_mutant(seed).data]
        for k, data in enumerate(datas):
            path = tmp_path / f"hostile-{seed}-{k}.jsonl"
            path.write_bytes(data)
            (kind, *_), taken = _same(path, block, monkeypatch)
            outcomes.add(kind)
            accepted += sum(taken)
    assert outcomes == {"ok", "error"}
    assert accepted > 50


@pytest.mark.parametrize("shape", [_hf_log_history, _trl_dpo, _miles_rows])
def test_c_equals_python_on_trainer_shaped_rows(tmp_path, monkeypatch, shape):
    rows = shape(random.Random(7))
    path = tmp_path / f"{shape.__name__}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for block in (256, 4096, 8 << 20):
        (kind, *_), taken = _same(path, block, monkeypatch)
        assert kind == "ok"
        assert taken and all(taken)  # one key order (`rows`) or a few (`grouped`)


def test_feed_uses_the_c_path_and_equals_python(monkeypatch):
    """Mirrors `feed` as the live tail and tests use it: whole lines consumed, a partial
    tail left (or a truncation error with `final`), same columns either way."""
    rng = random.Random(9)
    text = "".join(_row(rng, KEY_SETS[1], s, True) + "\n" for s in range(500)).encode()
    for tail, final in ((b"", True), (b'{"train/step": 5', False), (b'{"train/step": 5', True),
                        (b"   ", True)):
        results = []
        for use_c in (True, False):
            monkeypatch.setattr(reader, "USE_C", use_c)
            parser = JsonlParser("live.jsonl")
            try:
                used = parser.feed(text + tail, final=final)
                results.append(parser_state(parser, used))
            except RecordError as exc:
                results.append(("error", exc.file, exc.line, str(exc)))
        assert results[0] == results[1]


def test_debug_says_which_path_reads_rows(tmp_path):
    """Without the extension (its import blocked in a child) rows are read by the Python
    ways, the same series, and --debug's GATEKEEPER_DEBUG says so on stderr."""
    path = tmp_path / "r.jsonl"
    path.write_text(_clean_file(1, ws=True, lines=50), encoding="utf-8")
    assert reader.c_rows_status().startswith("C ")
    code = (
        "import sys\n"
        "if sys.argv[2] == 'block': sys.modules['gatekeeper.sources.jsonl._rows'] = None\n"
        "from gatekeeper.sources.jsonl.reader import JsonlParser, parse_file, c_rows_status\n"
        "p = JsonlParser(sys.argv[1]); parse_file(p, final=True)\n"
        "print(c_rows_status()); print(sorted((k, v[0][1].tobytes().hex()) "
        "for k, v in p.chunks.items()))\n"
    )
    env = dict(os.environ, GATEKEEPER_DEBUG="1")
    runs = [subprocess.run([sys.executable, "-c", code, str(path), how], capture_output=True,
                           text=True, env=env, check=True) for how in ("block", "built")]
    assert runs[0].stdout.splitlines()[0].startswith("pure Python (the C extension")
    assert "JSONL rows are read by the pure-Python path" in runs[0].stderr
    assert runs[1].stdout.splitlines()[0].startswith("C ")
    assert "pure-Python" not in runs[1].stderr
    assert runs[0].stdout.splitlines()[1] == runs[1].stdout.splitlines()[1]


@pytest.mark.parametrize("odd", [
    None,
    '{"_step": 7.5, "a": 1, "b\u00e9": 2, "\u03bb/x": 3, "c d": 4}',
    '{"_step": 7, "a": true, "b\u00e9": 2, "\u03bb/x": 3, "c d": 4}',
])
def test_live_polls_read_the_same_with_c_on_and_off(tmp_path, monkeypatch, odd):
    """Mirrors `LiveJsonlSource.poll` on a file growing in uneven chunks (a partial last
    line left for the next poll): the same points each poll, the same error, and C did
    read blocks of new lines."""
    from gatekeeper.sources.jsonl.live import LiveJsonlSource

    lines = _clean_file(2, ws=True, lines=400).split("\n")  # not splitlines: "\r" is in lines
    if odd is not None:
        lines[250] = odd
    text = "\n".join(lines).encode()
    rng = random.Random(4)
    cuts = [*sorted(rng.sample(range(1, len(text)), 12)), len(text)]
    results, taken = [], []
    real = JsonlParser.parse_block
    monkeypatch.setattr(JsonlParser, "parse_block", lambda self, *a, **kw: (
        taken.append(real(self, *a, **kw)) or taken[-1]))
    for use_c in (True, False):
        monkeypatch.setattr(reader, "USE_C", use_c)
        (tmp_path / str(use_c)).mkdir()
        path = tmp_path / str(use_c) / "live.jsonl"
        path.write_bytes(b"")
        src, polls, prev = LiveJsonlSource(str(path)), [], 0
        for cut in cuts:
            with open(path, "ab") as fh:
                fh.write(text[prev:cut])
            prev = cut
            try:
                poll = src.poll()
            except RecordError as exc:
                polls.append(("error", type(exc), Path(exc.file or "").name, exc.line,
                              str(exc).replace(str(path), "PATH")))
                break
            polls.append({m: (s.step_key, s.steps.tobytes(), s.values.tobytes())
                          for m, s in poll.series.items()})
        results.append(polls)
    assert results[0] == results[1]
    assert any(taken)
    assert isinstance(results[0][-1], tuple) == (odd is not None and "7.5" in odd)  # error


@pytest.mark.parametrize("block", [300, 4096, 8 << 20])
def test_grouped_rows_equal_python_and_odd_lines_decline(tmp_path, monkeypatch, block):
    """Mirrors `_grouped_rows`: rows of three key orders (train rows, eval rows sharing
    "epoch" with them, a summary row), one table per order in the order of their first
    lines, NaN/marker values and step doubts included; then one hostile value, an escaped
    key of a known order, or an event line among them: the block declines, the Python
    ways decide, the same outcome either way."""
    rng = random.Random(block)

    def lines() -> list[str]:
        out = []
        for s in range(120):
            out.append(f'{{"loss": {_value(rng)}, "epoch": {s / 40}, "step": {s}}}')
            if s % 7 == 0:
                out.append(f'{{"eval_loss": {_value(rng)}, "epoch": {s / 40}, "step": {s}}}')
        out.append('{"train_runtime": 8.5, "epoch": 3.0, "step": 120}')
        return out

    clean = lines()
    path = tmp_path / "grouped.jsonl"
    path.write_text("\n".join(clean) + "\n", encoding="utf-8")
    (kind, *_), taken = _same(path, block, monkeypatch)
    assert kind == "ok" and taken and all(taken)
    odd_lines = [*(f'{{"loss": {v}, "epoch": 1.0, "step": 50}}' for v in HOSTILE_VALUES[:20]),
                 '{"eval_lo\\u0073s": 1, "epoch": 1.0, "step": 50}',
                 '{"event": "end", "state": "failed"}', '{"loss": 1, "step": 2.5}',
                 '{"loss": 1, "epoch": 1.0, "step": 9007199254740993}']
    outcomes = set()
    for i, odd in enumerate(odd_lines):
        spoilt = list(clean)
        spoilt[60] = odd
        path = tmp_path / f"grouped-odd-{i}.jsonl"
        path.write_text("\n".join(spoilt) + "\n", encoding="utf-8")
        outcomes.add(_same(path, block, monkeypatch)[0][0])
    assert outcomes == {"ok", "error"}
