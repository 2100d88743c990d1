"""Damaged MLflow file stores: a run written by the real mlflow client, then one seeded
change to its files — metric lines, meta.yaml, params, tags, links, FIFOs — labelled with
what gatekeeper must answer (tests/fuzz/test_fuzz_mlflow.py checks it).

The labels follow mlflow 3.17.2's FileStore reader: a metric line is `TIMESTAMP VALUE
[STEP [DATASET DIGEST]]` split on single spaces, timestamp and step through `int()`, value
through `float()`; gatekeeper adds that steps and timestamps fit int64. The template run's
`train/loss` is judged by `max: 2.0`, so the oracle knows the verdict of a healthy file.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.gen import mutate

METRIC = "metrics/train/loss"
BOUND = 2.0  # the fuzz policy: train/loss max 2.0

TS_OK = ["1000", "0", "-1", "1764800000000", "9223372036854775807"]
TS_BAD = ["x", "1.5", "1e3", "9223372036854775808", "0x10"]
STEP_OK = ["0", "3", "-5", "99", "9223372036854775807", "-9223372036854775808", "+4"]
STEP_BAD = ["1.5", "1e3", "abc", "NaN", "9223372036854775808", "-9223372036854775809", "0x1"]
VALUE_OK = {
    "0.5": 0.5, "1.5": 1.5, "5.0": 5.0, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
    "Infinity": math.inf, "1e-300": 1e-300, "1_0": 10.0, "-0.0": -0.0, "2": 2.0,
    "1.7976931348623157e308": math.inf,  # what a SQL store makes of Inf: read back as Inf
}
VALUE_BAD = ["abc", "0x1", "1,5", "--1", "1.2.3", "nan1"]
BAD_LINES = [b"", b"123", b"1 2 3 4", b"1000  0.5 3", b"1000\t0.5\t3", b"1 2 3 4 5 6",
             b"1000 0.5 \xff", b"\xc3\x28 1 2", b"1000 \xed\xa0\x80 1", b"1000 0.5 3\x00"]


@dataclass
class Expect:
    """What gatekeeper must answer: `rc` (None: 0, 1 or 2 all fine), and for exit 2 the
    file the error names (relative to the run) and, for a metric line, one of `lines`."""

    name: str
    rc: int | None
    file: str | None = None
    lines: set[int] | None = None


def verdict(values: list[float]) -> int:
    """The fuzz policy's exit code on a finished run with these `train/loss` points."""
    return 1 if any(not math.isfinite(v) or v > BOUND for v in values) else 0


def _metric_line(rng: random.Random, bad: bool) -> tuple[bytes, float | None]:
    """One metric line as mlflow writes it (and its value), or a line mlflow's reader or
    gatekeeper's int64 rule refuses."""
    ts, step = rng.choice(TS_OK), rng.choice(STEP_OK)
    value = rng.choice(list(VALUE_OK))
    if bad:
        which = rng.randrange(4)
        if which == 0:
            return rng.choice(BAD_LINES), None
        ts = rng.choice(TS_BAD) if which == 1 else ts
        step = rng.choice(STEP_BAD) if which == 2 else step
        value = rng.choice(VALUE_BAD) if which == 3 else value
        return f"{ts} {value} {step}".encode(), None
    form = rng.randrange(6)
    fields = [ts, value] if form == 0 else [ts, value, step, "ds", "d1g3st"] if form == 1 else [
        ts, value, step
    ]
    end = "\r" if rng.random() < 0.1 else ""  # CRLF: mlflow strips the line
    return (" ".join(fields) + end).encode(), VALUE_OK[value]


def _metric_lines(rng: random.Random, run: Path, name: str) -> Expect:
    n = rng.randrange(0, 8)
    bad_at = {i + 1 for i in range(n) if rng.random() < 0.25}
    lines, values = [], []
    for i in range(n):
        line, value = _metric_line(rng, i + 1 in bad_at)
        lines.append(line)
        if value is not None:
            values.append(value)
    (run / METRIC).write_bytes(b"".join(line + b"\n" for line in lines))
    if n == 0:
        return Expect(name, 2, METRIC)  # no points: an error, never "nothing to judge"
    if bad_at:
        return Expect(name, 2, METRIC, bad_at)
    return Expect(name, verdict(values))


def _whole_file(rng: random.Random, run: Path, name: str) -> Expect:
    """A file of the run replaced by something that is not a readable regular file."""
    rel = rng.choice([METRIC, "meta.yaml", "params/lr", "tags/team"])
    path = run / rel
    how = rng.choice(["fifo", "dev-zero", "dangling", "regular-link", "dir", "empty"])
    healthy = verdict([1.0, 0.5, 0.25])
    if how == "regular-link":  # a link to a regular file is read as that file
        target = run.parent / f"{name}-{path.name}"
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target)
        return Expect(name, healthy)
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "dangling":
        path.symlink_to(run / "no-such-file")
    elif how == "dir":
        path.mkdir()  # not a file: gone from the run (a missing metric is an ERROR)
        if rel == METRIC:
            return Expect(name, 1)
        return Expect(name, 2, rel) if rel == "meta.yaml" else Expect(name, healthy)
    else:
        path.write_bytes(b"")
        if rel in (METRIC, "meta.yaml"):
            return Expect(name, 2, rel)
        return Expect(name, healthy)  # an empty param or tag is the empty string
    return Expect(name, 2, rel)


STATUS = {"1": 1, "2": 1, "3": 0, "4": 1, "5": 1}  # RUNNING/SCHEDULED incomplete, FAILED, KILLED
WRONG_TYPE = ["soon", "1.5", "[1]", "{a: 1}", "1e3"]  # for an int64 field of RunInfo
STATUS_BAD = ["-1", "0", "6", "x", "3.5", "null", "[1]", "{a: 1}", "''"]


def _meta(rng: random.Random, run: Path, name: str) -> Expect:
    path = run / "meta.yaml"
    text = path.read_text()
    which = rng.randrange(5)
    if which == 4:  # a value of another type: mlflow keeps what YAML typed (a repeated key:
        # the last one counts), and meets it only when it sends the run on
        key = rng.choice(["start_time", "end_time"])
        path.write_text(text + f"{key}: {rng.choice(WRONG_TYPE)}\n")
        return Expect(name, 2, "meta.yaml")
    if which == 0:
        status = rng.choice(list(STATUS) + STATUS_BAD)
        path.write_text(text.replace("status: 3", f"status: {status}"))
        return Expect(name, STATUS[status]) if status in STATUS else Expect(name, 2, "meta.yaml")
    if which == 1:  # a key mlflow needs
        key = rng.choice(["experiment_id", "run_id"])
        path.write_text("".join(
            line for line in text.splitlines(True) if not line.startswith(f"{key}:")
        ))
        return Expect(name, 2, "meta.yaml")
    if which == 2:  # YAML that is no mapping, or does not parse
        path.write_bytes(rng.choice([b"status: [\n", b"- 1\n", b"just text\n", b"\xff\xfe",
                                     b"a: &x [*x]\n", b"{\n"]))
        return Expect(name, 2, "meta.yaml")
    path.write_bytes(mutate(rng, text.encode()))
    return Expect(name, None, "meta.yaml")


def _param_or_tag(rng: random.Random, run: Path, name: str) -> Expect:
    rel = rng.choice(["params/lr", "tags/team", "params/opt/beta", "tags/note"])
    path = run / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if rng.random() < 0.5:
        path.write_bytes(rng.choice([b"\xff", b"0.1\x80", b"\xed\xa0\x80", b"a\xc3x"]))
        return Expect(name, 2, rel)
    path.write_text(rng.choice(["0.2", "", "true", "a b", "x" * 5000, "ünï", "1e400", "\n"]))
    return Expect(name, verdict([1.0, 0.5, 0.25]))


def _metric_mutant(rng: random.Random, run: Path, name: str) -> Expect:
    path = run / METRIC
    path.write_bytes(mutate(rng, path.read_bytes()))
    return Expect(name, None, METRIC)


def mlflow_case(seed: int, run: Path) -> Expect:
    """Damage the run in `run` (a fresh copy of the template) the way `seed` picks."""
    rng = random.Random(seed)
    kind = rng.choices(
        [_metric_lines, _whole_file, _meta, _param_or_tag, _metric_mutant],
        weights=[40, 20, 20, 10, 10],
    )[0]
    return kind(rng, run, f"mlflow-{seed}-{kind.__name__.strip('_')}")
