"""The `.wandb` history reader against two references, on runs the real SDK wrote offline
(wandb 0.31, wandb-core): the SDK's own decoding of the same records
(`proto_util.dict_from_proto_list`, json.loads per value), and the reader's other path
(forked workers over block-aligned ranges vs one process). The runs hold what a fast path
must keep: NaN and ±Inf points, `None` logged as null, nested dicts, define_metric step
axes, and a resumed run's two segments.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.sources.wandb import decode as wandb_decode
from gatekeeper.sources.wandb.axes import NESTED
from gatekeeper.sources.wandb.local import WandbLocalSource
from gatekeeper.sources.wandb.log import LogReader
from tests.wandb.test_real_runs import train

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
proto_util = pytest.importorskip("wandb.sdk.lib.proto_util")


@pytest.fixture(scope="module")
def runs(miles_run: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """`.wandb` files: miles' axes with NaN/Inf and a nested dict (conftest), HF/TRL with a
    reward logged as None from step 7, and a run resumed with the same id (2 segments)."""
    hf = tmp_path_factory.mktemp("hf-null")
    assert train(hf, "hf", "400", "--null-after", "7").returncode == 0
    resumed = tmp_path_factory.mktemp("resumed")
    assert train(resumed, "hf", "30", "--resume-id", "ref01").returncode == 0
    time.sleep(1.1)  # the directory name carries the start time, to the second
    assert train(resumed, "hf", "60", "--start", "30", "--resume-id", "ref01").returncode == 0
    files = [p for root in (miles_run, hf / "wandb", resumed / "wandb")
             for p in sorted(root.glob("*run-*/*.wandb"))]
    assert len(files) == 4
    return files


def _flat(row: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, (*prefix, key)))
        else:
            out[NESTED.join((*prefix, key))] = value
    return out


def sdk_columns(path: Path) -> tuple[list[float], dict[str, tuple[list[int], list[float]]]]:
    """Steps and per-key (rows, values) as the SDK decodes the history records."""
    steps: list[float] = []
    cols: dict[str, tuple[list[int], list[float]]] = {}
    for raw in LogReader(str(path)).records():
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") != "history":
            continue
        row = _flat(proto_util.dict_from_proto_list(rec.history.item))
        for key, value in row.items():
            if key.startswith("_"):
                continue
            rows, values = cols.setdefault(key, ([], []))
            rows.append(len(steps))
            values.append(math.nan if value is None else float(value))
        steps.append(float(rec.history.step.num))
    return steps, cols


def test_the_reader_decodes_every_point_as_the_sdk_does(runs: list[Path]) -> None:
    for path in runs:
        part = wandb_decode.decode_range(str(path), 0, None, False)
        steps, cols = sdk_columns(path)
        assert part.steps == steps, path
        assert sorted(part.keys) == sorted(cols), path
        for key, (rows, values, mask) in part.keys.items():
            want_rows, want_values = cols[key]
            assert mask is None or mask.all(), (path, key)
            np.testing.assert_array_equal(rows, want_rows, err_msg=f"{path} {key}")
            np.testing.assert_array_equal(values, want_values, err_msg=f"{path} {key}")
    miles = wandb_decode.decode_range(str(runs[0]), 0, None, False).keys
    assert miles[NESTED.join(("sys", "gpu", "mem"))][1][:3].tolist() == [0.0, 1.0, 2.0]
    grad = miles["train/grad_norm"][1]
    assert math.isnan(grad[5]) and grad[6] == math.inf
    null = wandb_decode.decode_range(str(runs[1]), 0, None, False).keys["rewards/broken"][1]
    assert null[:7].tolist() == [1.0] * 7 and np.isnan(null[7:]).all() and len(null) == 400


def _read(spec: str, forked: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    """The run read serially or by forked workers, and the most ranges one read joined."""
    joined: list[int] = []
    real_join = wandb_decode.join

    def join(parts: list[Any]) -> Any:  # called only when forked workers read the ranges
        joined.append(len(parts))
        return real_join(parts)

    with monkeypatch.context() as m:
        m.setattr(wandb_decode, "PARALLEL_MIN_BYTES", 0 if forked else 1 << 62)
        m.setattr(wandb_decode, "FORK_WITH_C", forked)
        m.setattr(wandb_decode.os, "cpu_count", lambda: 4)
        # the suite may leave threads of earlier tests running: decode then reads serially
        # (fork with threads is unsafe), which this test must not mistake for its result
        m.setattr(wandb_decode.threading, "active_count", lambda: 1)
        m.setattr(wandb_decode, "join", join)
        run = WandbLocalSource(spec).read()
    assert bool(joined) == forked, joined
    return run, max(joined, default=0)


def test_forked_workers_read_what_one_process_reads(
    runs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges cut at 32 KiB block boundaries (records split across them) and joined."""
    for spec in (str(runs[0]), str(runs[1]), str(runs[2].parents[1])):  # + resumed, whole
        one, _ = _read(spec, False, monkeypatch)
        forked, ranges = _read(spec, True, monkeypatch)
        assert ranges > 1 or spec == str(runs[2].parents[1]), f"{spec}: one range only"
        assert one.series.keys() == forked.series.keys() and one.series, spec
        for name, series in one.series.items():
            other = forked.series[name]
            assert series.step_key == other.step_key, name
            np.testing.assert_array_equal(series.steps, other.steps, err_msg=name)
            np.testing.assert_array_equal(series.values, other.values, err_msg=name)
        assert (one.state, one.state_detail) == (forked.state, forked.state_detail)
    resumed, _ = _read(str(runs[2].parents[1]), False, monkeypatch)
    assert json.dumps(resumed.series["train/loss"].steps.tolist()) == json.dumps(list(range(60)))
